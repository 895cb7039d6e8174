package server

import "github.com/lethehq/lethe/internal/retry"

// RetryParts builds the server's retry collector and notifier, so that
// tests can step them with an injected clock instead of waiting on timers.
func (s *Server) RetryParts() (*retry.Collector, *retry.Notifier, error) { return s.retryParts() }
