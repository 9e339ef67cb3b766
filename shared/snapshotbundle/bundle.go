// Package snapshotbundle is the signed file that lets an edge serve flags before it has ever
// reached a control plane: `controlplane snapshots export` writes it, `edge
// --bootstrap-bundle` reads it. The signature (Ed25519) is what makes it safe to ship a
// bundle through an image registry or a config store: an edge given the public key serves
// nothing a holder of the private key did not sign.
//
// A bundle is the magic line, the signature, then the payload: a WatchResponse holding the
// snapshots and the identity of the database they came from. It is the message an edge
// already applies during a catch-up, so a bootstrapped edge holds exactly what a connected
// one would have held at export time, and the control plane's first catch-up replaces it
// version by version.
package snapshotbundle

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/shared/syncpb"
)

// magic starts every bundle; the version in it changes with the layout.
const magic = "flagedge-snapshot-bundle/1\n"

// ErrSignature means the bundle was altered after it was signed, or signed by another key.
var ErrSignature = errors.New("the bundle's signature does not verify with the public key: it was altered or signed by another key")

// Encode signs the snapshots of one database and returns the bundle.
func Encode(key ed25519.PrivateKey, databaseID string, snapshots []*syncpb.ProjectSnapshot) ([]byte, error) {
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(&syncpb.WatchResponse{
		DatabaseId: databaseID, Snapshots: snapshots})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(magic)+ed25519.SignatureSize+len(payload))
	out = append(out, magic...)
	out = append(out, ed25519.Sign(key, signed(payload))...)
	return append(out, payload...), nil
}

// Decode verifies a bundle with the public key and returns its content as the message the
// edge applies. Nothing of a bundle that does not verify is parsed.
func Decode(key ed25519.PublicKey, data []byte) (*syncpb.WatchResponse, error) {
	rest, ok := bytes.CutPrefix(data, []byte(magic))
	if !ok {
		return nil, errors.New("not a flagedge snapshot bundle (or of a newer layout)")
	}
	if len(rest) < ed25519.SignatureSize {
		return nil, errors.New("the bundle is truncated")
	}
	sig, payload := rest[:ed25519.SignatureSize], rest[ed25519.SignatureSize:]
	if !ed25519.Verify(key, signed(payload), sig) {
		return nil, ErrSignature
	}
	var msg syncpb.WatchResponse
	if err := proto.Unmarshal(payload, &msg); err != nil {
		return nil, fmt.Errorf("a signed bundle that does not parse: %w", err)
	}
	return &msg, nil
}

// signed is what the signature covers: the magic line too, so a payload signed for another
// layout or purpose cannot be passed off as this one.
func signed(payload []byte) []byte {
	return append([]byte(magic), payload...)
}

// GenerateKey returns a new key pair, PEM-encoded: the private key as PKCS #8, the public
// key as PKIX, the forms openssl reads and writes (`openssl genpkey -algorithm ed25519`
// makes a private key this package accepts).
func GenerateKey() (privatePEM, publicPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// ParsePrivateKey reads a PEM PKCS #8 Ed25519 private key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	der, err := pemBlock(data, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the private key is %T, not Ed25519", k)
	}
	return priv, nil
}

// ParsePublicKey reads a PEM PKIX Ed25519 public key.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	der, err := pemBlock(data, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, err
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("the public key is %T, not Ed25519", k)
	}
	return pub, nil
}

func pemBlock(data []byte, typ string) ([]byte, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("no PEM block (want %q)", typ)
	}
	if block.Type != typ {
		return nil, fmt.Errorf("a PEM %q block, want %q", block.Type, typ)
	}
	return block.Bytes, nil
}
