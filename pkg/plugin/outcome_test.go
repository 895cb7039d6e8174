package plugin_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want plugin.Result
	}{
		{"nil is done", nil, plugin.Result{Outcome: plugin.OutcomeDone}},
		{"blocked", plugin.Blocked(time.Minute, "locked"), plugin.Result{Outcome: plugin.OutcomeBlocked, Message: "locked", RetryAfter: time.Minute}},
		{"blocked, host chooses", plugin.Blocked(0, "has dependents"), plugin.Result{Outcome: plugin.OutcomeBlocked, Message: "has dependents"}},
		{"negative retry becomes 0", plugin.Blocked(-time.Second, "x"), plugin.Result{Outcome: plugin.OutcomeBlocked, Message: "x"}},
		{"wrapped blocked", fmt.Errorf("delete snapshot: %w", plugin.Blocked(time.Second, "in use")), plugin.Result{Outcome: plugin.OutcomeBlocked, Message: "in use", RetryAfter: time.Second}},
		{"joined blocked", errors.Join(errors.New("other"), plugin.Blocked(time.Second, "in use")), plugin.Result{Outcome: plugin.OutcomeBlocked, Message: "in use", RetryAfter: time.Second}},
		{"skipped", plugin.Skipped("not mine"), plugin.Result{Outcome: plugin.OutcomeSkipped, Message: "not mine"}},
		{"wrapped skipped", fmt.Errorf("a: %w", fmt.Errorf("b: %w", plugin.Skipped("no handle"))), plugin.Result{Outcome: plugin.OutcomeSkipped, Message: "no handle"}},
		{"other error fails", errors.New("boom"), plugin.Result{Outcome: plugin.OutcomeFailed, Message: "boom"}},
		{"wrapped other error keeps its text", fmt.Errorf("delete: %w", errors.New("denied")), plugin.Result{Outcome: plugin.OutcomeFailed, Message: "delete: denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, plugin.Classify(tc.err))
		})
	}
}

func TestOutcomeErrors(t *testing.T) {
	b := plugin.Blocked(time.Minute, "locked")
	var be *plugin.BlockedError
	require.ErrorAs(t, b, &be)
	require.Equal(t, time.Minute, be.RetryAfter)
	require.Equal(t, "blocked (retry after 1m0s): locked", b.Error())

	s := plugin.Skipped("not mine")
	var se *plugin.SkippedError
	require.ErrorAs(t, s, &se)
	require.Equal(t, "skipped: not mine", s.Error())
	require.False(t, errors.As(s, &be))
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[plugin.Outcome]string{
		plugin.OutcomeDone: "done", plugin.OutcomeBlocked: "blocked", plugin.OutcomeFailed: "failed",
		plugin.OutcomeSkipped: "skipped", plugin.Outcome(0): "outcome(0)", plugin.Outcome(42): "outcome(42)",
	} {
		require.Equal(t, want, o.String())
	}
}
