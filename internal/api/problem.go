package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// ProblemType is the media type of every error the API returns.
const ProblemType = "application/problem+json"

// Problem is an RFC 9457 problem document. Type is always about:blank:
// Title is the status's text and Detail says what went wrong.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}

// problemError is an error that is already a problem.
type problemError struct {
	status int
	detail string
}

func (e *problemError) Error() string { return e.detail }

func newProblem(status int, detail string) error {
	return &problemError{status: status, detail: detail}
}

// writeProblem writes status and detail as a problem document.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, detail string) {
	w.Header().Set("Content-Type", ProblemType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Instance: r.URL.Path})
}

// statusOf maps an engine or catalog error to an HTTP status; ok is false
// for an error the caller did not cause (500, its text not shown).
func statusOf(err error) (status int, ok bool) {
	var pe *problemError
	var nf *backup.NotFoundError
	var te *catalog.TransitionError
	switch {
	case errors.As(err, &pe):
		return pe.status, true
	case errors.As(err, &nf), errors.Is(err, catalog.ErrNotFound):
		return http.StatusNotFound, true
	case errors.As(err, &te), errors.Is(err, catalog.ErrConflict), errors.Is(err, catalog.ErrAlreadyExists),
		errors.Is(err, catalog.ErrLeaseHeld):
		return http.StatusConflict, true
	case errors.Is(err, catalog.ErrInvalid):
		return http.StatusBadRequest, true
	}
	return http.StatusInternalServerError, false
}

func isNotFound(err error) bool { return errors.Is(err, catalog.ErrNotFound) }
