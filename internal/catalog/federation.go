package catalog

import (
	"context"
	"encoding/json"
	"time"
)

// Federation: references that cross Lethe servers (peers). The referrer's
// catalog keeps a forward edge (PeerReference) and sends its intent
// through the peer outbox (PeerMessage); the target's catalog keeps a
// back-reference stub (BackReference) for each one it acknowledged.
// docs/federation.md is the protocol; internal/federation the transport.

// PeerEdgeState is where a forward edge stands in the intent →
// acknowledgement exchange.
type PeerEdgeState string

// The forward edge states. A referrer believes in a stub on the target's
// peer only once its edge is Acknowledged.
const (
	// PeerEdgePending: the intent is in the outbox, not answered yet.
	PeerEdgePending PeerEdgeState = "Pending"
	// PeerEdgeAcknowledged: the target's peer stored the back-reference.
	PeerEdgeAcknowledged PeerEdgeState = "Acknowledged"
	// PeerEdgeRefused: the target's peer answered no (Reason says why).
	PeerEdgeRefused PeerEdgeState = "Refused"
)

// PeerReference is a forward edge: a local referrer's reference to a
// resource on a peer.
type PeerReference struct {
	Referrer       ObjectRef      `json:"referrer"`
	Peer           string         `json:"peer"`
	Target         Key            `json:"target"`
	OnTargetDelete OnTargetDelete `json:"onTargetDelete"`
	// IdempotencyKey names the intent: every delivery of it carries the
	// same key, so the target's peer stores its stub once.
	IdempotencyKey string        `json:"idempotencyKey"`
	State          PeerEdgeState `json:"state"`
	Reason         string        `json:"reason,omitempty"`
	CreatedAt      time.Time     `json:"createdAt"`
	UpdatedAt      time.Time     `json:"updatedAt"`
}

// BackReference is the stub the target's peer keeps for a remote
// referrer. While one exists, its target cannot be scheduled, deleted or
// collected (deletion across peers is not implemented yet, and an
// unanswered remote referrer is unknown, never absent).
type BackReference struct {
	Peer           string         `json:"peer"`
	Referrer       ObjectRef      `json:"referrer"`
	Target         Key            `json:"target"`
	OnTargetDelete OnTargetDelete `json:"onTargetDelete"`
	IdempotencyKey string         `json:"idempotencyKey"`
	CreatedAt      time.Time      `json:"createdAt"`
}

// PeerMessageType names what a PeerMessage asks of its peer.
type PeerMessageType string

// The message types implemented so far.
const (
	// PeerMsgRegisterBackReference asks the peer to store a stub; its
	// Body is the PeerReference.
	PeerMsgRegisterBackReference PeerMessageType = "RegisterBackReference"
	// PeerMsgDropBackReference tells the peer that a referrer is purged:
	// it drops the stub registered with the same IdempotencyKey. Its Body
	// is the PeerReference, as it was when its referrer was purged.
	PeerMsgDropBackReference PeerMessageType = "DropBackReference"
)

// PeerMessage is one row of the peer outbox, written in the same
// transaction as the change that causes it; delivered at least once, made
// idempotent on the receiving side by IdempotencyKey.
type PeerMessage struct {
	ID             int64           `json:"id"`
	Peer           string          `json:"peer"`
	Type           PeerMessageType `json:"type"`
	IdempotencyKey string          `json:"idempotencyKey"`
	// Epoch is the deletion epoch the message belongs to (0 for a
	// registration, which belongs to none).
	Epoch         int64             `json:"epoch"`
	Body          json.RawMessage   `json:"body"`
	State         NotificationState `json:"state"`
	NextAttemptAt time.Time         `json:"nextAttemptAt,omitzero"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"lastError,omitempty"`
	CreatedAt     time.Time         `json:"createdAt"`
	DeliveredAt   time.Time         `json:"deliveredAt,omitzero"`
	Holder        string            `json:"holder,omitempty"`
	// Lease fences a claim, as WorkItem.Epoch does.
	Lease int64 `json:"lease"`
}

// PeerAnswer is what the peer said to a delivered message.
type PeerAnswer struct {
	// Accepted: the peer did what the message asked (a registration:
	// the stub exists). Otherwise Reason says why not.
	Accepted bool
	Reason   string
}

// Federation is the catalog's part of the peer protocol.
type Federation interface {
	// AddPeerReference stores a forward edge from the local resource
	// ref.Referrer names (by kind, namespace and name; it must exist and
	// not be Deleting) in state Pending, its RegisterBackReference
	// message in the peer outbox and an audit entry, in one transaction.
	// Adding the same edge again returns the stored one and queues
	// nothing; the same edge with another onTargetDelete is ErrConflict.
	AddPeerReference(ctx context.Context, ref PeerReference) (*PeerReference, error)
	// PeerReferences lists the forward edges of a referrer (every edge
	// when referrerUID is empty), by peer and target.
	PeerReferences(ctx context.Context, referrerUID string) ([]*PeerReference, error)
	// ClaimPeerMessages leases up to limit due messages of the outbox;
	// each claim counts an attempt and gets a new Lease.
	ClaimPeerMessages(ctx context.Context, holder string, ttl time.Duration, limit int) ([]*PeerMessage, error)
	// AnswerPeerMessage records the peer's answer to the claim (id,
	// lease): the message is delivered and, in the same transaction, the
	// forward edge it registers becomes Acknowledged or Refused (audited).
	// ErrLeaseLost if the message was claimed again since.
	AnswerPeerMessage(ctx context.Context, id, lease int64, a PeerAnswer) error
	// RetryPeerMessage puts the claim (id, lease) off to next with lastErr:
	// no answer came, so nothing about the edge changes.
	RetryPeerMessage(ctx context.Context, id, lease int64, next time.Time, lastErr string) error
	// PeerMessages lists the outbox of peer (every peer when empty),
	// oldest first.
	PeerMessages(ctx context.Context, peer string) ([]*PeerMessage, error)
	// RegisterBackReference stores the stub b, in the name of b.Peer, in
	// one transaction with its audit entry. The target must exist and be
	// Active or Scheduled (ErrNotFound, *TransitionError). A replay of the
	// same IdempotencyKey returns the stored stub and changes nothing; the
	// same key with another referrer, target or onTargetDelete is
	// ErrInvalid and changes nothing.
	RegisterBackReference(ctx context.Context, b BackReference) (*BackReference, error)
	// DropBackReference removes the stub that b.Peer registered with
	// b.IdempotencyKey, in one transaction with its audit entry; its
	// referrer UID and target must be b's (ErrInvalid). A stub already
	// gone is not an error: dropped is false.
	DropBackReference(ctx context.Context, b BackReference) (dropped bool, err error)
	// BackReferences lists the stubs held for target (every stub when
	// target is the zero Key), by peer and referrer.
	BackReferences(ctx context.Context, target Key) ([]*BackReference, error)
}

// The audit actions of the federation.
const (
	// AuditPeerReference: a forward edge was added (on the referrer).
	AuditPeerReference = "peer-reference"
	// AuditPeerAcknowledged, AuditPeerRefused: the target's peer answered
	// (on the referrer).
	AuditPeerAcknowledged = "peer-reference-acknowledged"
	AuditPeerRefused      = "peer-reference-refused"
	// AuditBackReference: a stub was stored (on the target), in the name
	// of ActorPeerPrefix+peer.
	AuditBackReference = "back-reference"
	// AuditPeerReferenceDropped: a purged referrer's forward edge went,
	// and its peer is told (on the referrer); AuditBackReferenceDropped:
	// the stub went (on the target), in the name of the referrer's peer.
	AuditPeerReferenceDropped = "peer-reference-dropped"
	AuditBackReferenceDropped = "back-reference-dropped"
	// ActorPeerPrefix prefixes the actor of what a peer asked for.
	ActorPeerPrefix = "peer:"
)
