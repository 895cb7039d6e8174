package blobstore

// SetReadOnly declares the location at url read-only: nothing is to be
// deleted from it (ReadOnly says so; the deletion refuses). Reading and
// syncing it are unaffected.
func (l *Locations) SetReadOnly(url string) {
	loc, err := Location(url)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ro == nil {
		l.ro = map[string]bool{}
	}
	l.ro[loc] = true
}

// ReadOnly reports whether the location a backup recorded (url; "" is
// the default) was declared read-only, and its canonical URL.
func (l *Locations) ReadOnly(url string) (string, bool) {
	loc := l.defLoc
	if url != "" {
		u, err := Location(url)
		if err != nil {
			return url, false
		}
		loc = u
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return loc, l.ro[loc]
}
