// Command lethe deletes backups, and everything they created outside, safely.
package main

import (
	"os"

	"github.com/lethehq/lethe/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
