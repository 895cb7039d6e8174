package federation

import (
	"fmt"
	"regexp"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
	federationv1 "github.com/lethehq/lethe/proto/lethe/federation/v1"
)

// Messages between peers are bounded and validated like manifests before
// anything acts on them.

// MaxMessageBytes bounds every message a peer receives (gRPC refuses a
// larger one before it is decoded) and every message it sends.
const MaxMessageBytes = 16 << 10

var (
	kindRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,62}$`)
	keyRE  = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	uidRE  = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

func refErr(field string, r *federationv1.ObjectRef, wantUID bool) error {
	if r == nil {
		return fmt.Errorf("%s: missing", field)
	}
	if !kindRE.MatchString(r.GetKind()) {
		return fmt.Errorf("%s.kind %s: an upper-case letter, then at most 62 letters and digits", field, termtext.Quote(r.GetKind()))
	}
	if ns := r.GetNamespace(); ns != "" && len(validation.IsDNS1123Label(ns)) > 0 {
		return fmt.Errorf("%s.namespace %s: not a DNS label", field, termtext.Quote(ns))
	}
	if len(validation.IsDNS1123Subdomain(r.GetName())) > 0 {
		return fmt.Errorf("%s.name %s: not a DNS subdomain of at most 253 characters", field, termtext.Quote(r.GetName()))
	}
	switch {
	case wantUID && !uidRE.MatchString(r.GetUid()):
		return fmt.Errorf("%s.uid %s: want 1 to 64 letters, digits or '-'", field, termtext.Quote(r.GetUid()))
	case !wantUID && r.GetUid() != "":
		return fmt.Errorf("%s.uid: a target is named by kind, namespace and name only", field)
	}
	return nil
}

// ValidateRegister checks a RegisterBackReferenceRequest; the error is
// one line naming the first bad field.
func ValidateRegister(req *federationv1.RegisterBackReferenceRequest) error {
	if n := proto.Size(req); n > MaxMessageBytes {
		return fmt.Errorf("message of %d bytes: at most %d", n, MaxMessageBytes)
	}
	if err := peerNameErr(req.GetFromPeer()); err != nil {
		return fmt.Errorf("from_peer: %w", err)
	}
	if !keyRE.MatchString(req.GetIdempotencyKey()) {
		return fmt.Errorf("idempotency_key %s: want 1 to 64 letters, digits or '-'", termtext.Quote(req.GetIdempotencyKey()))
	}
	if err := refErr("referrer", req.GetReferrer(), true); err != nil {
		return err
	}
	if err := refErr("target", req.GetTarget(), false); err != nil {
		return err
	}
	if _, err := fromProtoOnDelete(req.GetOnTargetDelete()); err != nil {
		return err
	}
	return nil
}

var onDeleteToProto = map[catalog.OnTargetDelete]federationv1.OnTargetDelete{
	catalog.RefBlock:         federationv1.OnTargetDelete_ON_TARGET_DELETE_BLOCK,
	catalog.RefUnset:         federationv1.OnTargetDelete_ON_TARGET_DELETE_UNSET,
	catalog.RefCascade:       federationv1.OnTargetDelete_ON_TARGET_DELETE_CASCADE,
	catalog.RefAllowDangling: federationv1.OnTargetDelete_ON_TARGET_DELETE_ALLOW_DANGLING,
}

func fromProtoOnDelete(p federationv1.OnTargetDelete) (catalog.OnTargetDelete, error) {
	for k, v := range onDeleteToProto {
		if v == p {
			return k, nil
		}
	}
	return "", fmt.Errorf("on_target_delete %d: want block, unset, cascade or allowDangling", p)
}

// registerRequest is the wire form of a forward edge's intent, sent as
// peer self.
func registerRequest(self string, ref *catalog.PeerReference) (*federationv1.RegisterBackReferenceRequest, error) {
	on, ok := onDeleteToProto[ref.OnTargetDelete]
	if !ok {
		return nil, fmt.Errorf("onTargetDelete %q", ref.OnTargetDelete)
	}
	req := &federationv1.RegisterBackReferenceRequest{
		FromPeer:       self,
		IdempotencyKey: ref.IdempotencyKey,
		Referrer: &federationv1.ObjectRef{Kind: ref.Referrer.Kind, Namespace: ref.Referrer.Namespace,
			Name: ref.Referrer.Name, Uid: ref.Referrer.UID},
		Target:         &federationv1.ObjectRef{Kind: ref.Target.Kind, Namespace: ref.Target.Namespace, Name: ref.Target.Name},
		OnTargetDelete: on,
	}
	return req, ValidateRegister(req)
}

// backReference is the stub a validated request asks for.
func backReference(req *federationv1.RegisterBackReferenceRequest) catalog.BackReference {
	on, _ := fromProtoOnDelete(req.GetOnTargetDelete())
	r, t := req.GetReferrer(), req.GetTarget()
	return catalog.BackReference{Peer: req.GetFromPeer(), IdempotencyKey: req.GetIdempotencyKey(), OnTargetDelete: on,
		Referrer: catalog.ObjectRef{Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName(), UID: r.GetUid()},
		Target:   catalog.Key{Kind: t.GetKind(), Namespace: t.GetNamespace(), Name: t.GetName()}}
}

// maxReasonBytes bounds the reason a peer gives for a refusal, as it is
// stored on the forward edge (and quoted when shown).
const maxReasonBytes = 1 << 10

func clipReason(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	s = s[:maxReasonBytes]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// ValidateDrop checks a DropBackReferenceRequest as ValidateRegister does.
func ValidateDrop(req *federationv1.DropBackReferenceRequest) error {
	if n := proto.Size(req); n > MaxMessageBytes {
		return fmt.Errorf("message of %d bytes: at most %d", n, MaxMessageBytes)
	}
	if err := peerNameErr(req.GetFromPeer()); err != nil {
		return fmt.Errorf("from_peer: %w", err)
	}
	if !keyRE.MatchString(req.GetIdempotencyKey()) {
		return fmt.Errorf("idempotency_key %s: want 1 to 64 letters, digits or '-'", termtext.Quote(req.GetIdempotencyKey()))
	}
	if err := refErr("referrer", req.GetReferrer(), true); err != nil {
		return err
	}
	return refErr("target", req.GetTarget(), false)
}

// dropRequest is the wire form of a purged referrer's edge.
func dropRequest(self string, ref *catalog.PeerReference) (*federationv1.DropBackReferenceRequest, error) {
	req := &federationv1.DropBackReferenceRequest{
		FromPeer:       self,
		IdempotencyKey: ref.IdempotencyKey,
		Referrer: &federationv1.ObjectRef{Kind: ref.Referrer.Kind, Namespace: ref.Referrer.Namespace,
			Name: ref.Referrer.Name, Uid: ref.Referrer.UID},
		Target: &federationv1.ObjectRef{Kind: ref.Target.Kind, Namespace: ref.Target.Namespace, Name: ref.Target.Name},
	}
	return req, ValidateDrop(req)
}
