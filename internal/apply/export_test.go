package apply

// WithChunkTaken sets Options.chunkTaken: f is told, after each document
// the engine takes, how many it has taken since it last planned a chunk.
func WithChunkTaken(o *Options, f func(n int)) { o.chunkTaken = f }

// ReadChunk is readChunk.
const ReadChunk = readChunk

// WithCycleStep sets Options.cycleStep: f is told of each step of the
// cycle check.
func WithCycleStep(o *Options, f func()) { o.cycleStep = f }
