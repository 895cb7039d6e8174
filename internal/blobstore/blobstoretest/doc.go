// Package blobstoretest is the conformance suite every blobstore backend must
// pass. Run calls it with a function that returns a fresh, empty storage URL;
// the suite opens stores through blobstore.Open, so URL parsing is covered
// too.
//
// It owns no storage of its own and must not be imported outside tests.
package blobstoretest
