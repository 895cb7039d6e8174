package api

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// SessionCookie is the console's session cookie.
const SessionCookie = "lethe_session"

// sessionTTL bounds a console session.
const sessionTTL = 12 * time.Hour

// session is a console login: the token it was opened with (by hash, so
// revoking the token ends it) and its anti-CSRF token.
type session struct {
	id        string
	tokenHash string
	csrf      string
	expires   time.Time
}

// sessions are the console's sessions, in memory: a restart logs the
// console out (lethe console url logs in again).
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	now func() time.Time
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, now: now}
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// open starts a session for the token whose hash is tokenHash.
func (s *sessions) open(tokenHash string) *session {
	ss := &session{id: randomID(), tokenHash: tokenHash, csrf: randomID(), expires: s.now().Add(sessionTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, o := range s.m {
		if !o.expires.After(s.now()) {
			delete(s.m, id)
		}
	}
	s.m[ss.id] = ss
	return ss
}

// fromRequest is the live session r's cookie names, or nil.
func (s *sessions) fromRequest(r *http.Request) *session {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[c.Value]
	if ss == nil || !ss.expires.After(s.now()) {
		delete(s.m, c.Value)
		return nil
	}
	return ss
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}
