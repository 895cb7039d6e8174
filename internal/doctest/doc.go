// Package doctest runs every command shown in the README and docs/ (its
// test, TestDocs, is the whole package): docs are code.
//
// What runs. Fenced blocks tagged sh or console, in order, one shell per
// file (what a block exports or creates, the next block of the file sees),
// against the lethe binary built once for the run, in a scratch home: HOME
// and the working folder are temporary, and the working folder is a copy
// of the checkout made of symbolic links (so that `go run ./internal/...`
// and `make build` work, and nothing is written into the checkout).
//
//   - In an sh block every line is run as bash runs it, with errexit and
//     pipefail: a failing command fails the test. A command that starts
//     with `lethe` (its continuation lines and here-documents included) must
//     exit 0, or the code its comment names: `# exit 3: ...`.
//     `lethe server` in the foreground (the docs say "in another terminal"
//     or "Ctrl-C to stop") runs for a few seconds and is then stopped with
//     SIGINT, as Ctrl-C would; it must exit 0.
//   - In a console block, `$ COMMAND` lines are commands and the lines
//     after each one, up to the next `$ `, are its output, compared with
//     what it printed (stdout and stderr together; a command with no
//     line after it shows no output, and its output is not compared). A
//     following
//     `$ echo $?` names the exit code the command must have; otherwise it
//     must exit 0, or the code its `# exit N` comment names.
//   - A block right after <!-- doctest: file NAME --> (a manifest, a
//     config file) is written to NAME in the working folder, where it
//     stands, as a reader would save it.
//   - An untagged block right after the marker <!-- doctest: output --> is
//     the output of the last command run before it.
//
// Comparing output: times (RFC 3339, and ages and durations such as 3s or
// 225d11h), UIDs, sha256 digests and process ids are normalised on both
// sides; runs of spaces are one space (table columns widen with their
// values); the scratch home reads /home/you; a line `...` in the doc
// stands for any number of lines, and `…` inside a line for any text.
//
// What does not run. A block right after <!-- doctest: skip REASON --> is
// counted and printed with its reason (systemd, sudo, a real cluster or
// cloud). An untagged block that holds a command (a line beginning with
// `lethe ` or `$ `) must be tagged or marked: there is no silent skip.
package doctest
