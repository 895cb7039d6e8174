package cli

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/lethehq/lethe/internal/termtext"
)

// newBar is a progress bar on stderr for total units of long work, or nil
// when stderr is not a terminal or the output is structured (a script
// reads it): progress is for a person watching.
func (a *app) newBar(total int64, desc, units, out string) *progressbar.ProgressBar {
	if !a.s.InteractiveErr || structured(out) || total <= 0 {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(a.s.Err),
		progressbar.OptionSetDescription(termtext.Quote(desc)),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
	}
	if units == "bytes" {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString(units))
	}
	bar := progressbar.NewOptions64(total, opts...)
	_ = bar.RenderBlank() // at once, not after the first throttle
	return bar
}

// barReader counts what is read of a tarball on a bar: registration reads
// it twice (checking it, then, after seeking its end for the size,
// storing it), the bar once for each pass.
type barReader struct {
	rs     io.ReadSeeker
	bar    *progressbar.ProgressBar
	name   string
	sawEnd bool
}

func (r *barReader) Read(p []byte) (int, error) {
	n, err := r.rs.Read(p)
	_ = r.bar.Add(n)
	return n, err
}

func (r *barReader) Seek(offset int64, whence int) (int64, error) {
	pos, err := r.rs.Seek(offset, whence)
	switch {
	case err != nil:
	case whence == io.SeekEnd:
		r.sawEnd = true
	case pos == 0:
		r.bar.Reset()
		if r.sawEnd {
			r.bar.Describe(termtext.Quote("storing " + r.name))
		}
		_ = r.bar.RenderBlank()
	}
	return pos, err
}
