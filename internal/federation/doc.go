// Package federation is Lethe's peer protocol (docs/federation.md): the
// configuration of peers, mutual TLS with the peer name checked against
// the certificate, the bounded messages, the PeerService server and the
// dispatcher that drains the peer outbox.
//
// Implemented so far: a reference to a resource on a peer is stored as a
// forward edge with its RegisterBackReference intent in the outbox (one
// transaction), the dispatcher delivers it, and the target's peer stores a
// back-reference stub only for a peer that its configuration accepts and
// whose certificate names it. Only an answer moves the edge; a peer that
// cannot be reached leaves it Pending. Deletion across peers
// (PrepareDelete and what follows) is designed, not implemented: a stub
// makes its target undeletable.
package federation
