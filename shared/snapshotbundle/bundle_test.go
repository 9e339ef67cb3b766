package snapshotbundle

import (
	"bytes"
	"errors"
	"testing"

	"github.com/flagedge/flagedge/shared/syncpb"
)

func keys(t testing.TB) ([]byte, []byte) {
	t.Helper()
	priv, pub, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

func sample() []*syncpb.ProjectSnapshot {
	return []*syncpb.ProjectSnapshot{
		{ProjectId: 1, Version: 7, Name: "one", ApiToken: "phc_one",
			Flags: []*syncpb.Flag{{Id: 3, Key: "beta", Active: true, Filters: []byte(`{"groups":[{"rollout_percentage":100}]}`)}}},
		{ProjectId: 2, Version: 2, Name: "two", ApiToken: "phc_two"},
	}
}

func TestRoundTrip(t *testing.T) {
	privPEM, pubPEM := keys(t)
	priv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Encode(priv, "db-1", sample())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := Decode(pub, data)
	if err != nil {
		t.Fatal(err)
	}
	if msg.DatabaseId != "db-1" || len(msg.Snapshots) != 2 || msg.Snapshots[0].Flags[0].Key != "beta" || msg.InitialSyncDone {
		t.Fatalf("decoded %v", msg)
	}
	again, _ := Encode(priv, "db-1", sample())
	if !bytes.Equal(data, again) {
		t.Error("the same snapshots give another bundle: the encoding is not deterministic")
	}
}

// Every single-byte change anywhere in a bundle is refused, and nothing of it is returned.
func TestTamperedBundlesAreRefused(t *testing.T) {
	privPEM, pubPEM := keys(t)
	priv, _ := ParsePrivateKey(privPEM)
	pub, _ := ParsePublicKey(pubPEM)
	data, err := Encode(priv, "db-1", sample())
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x01
		if msg, err := Decode(pub, bad); err == nil || msg != nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
	}
	if _, err := Decode(pub, data[:len(data)-1]); !errors.Is(err, ErrSignature) {
		t.Errorf("a shortened payload: %v, want ErrSignature", err)
	}
	if _, err := Decode(pub, append(bytes.Clone(data), 0)); !errors.Is(err, ErrSignature) {
		t.Errorf("a lengthened payload: %v, want ErrSignature", err)
	}
	if _, err := Decode(pub, data[:len(magic)+10]); err == nil {
		t.Error("a truncated signature was accepted")
	}
	_, otherPubPEM := keys(t)
	otherPub, _ := ParsePublicKey(otherPubPEM)
	if _, err := Decode(otherPub, data); !errors.Is(err, ErrSignature) {
		t.Errorf("another key: %v, want ErrSignature", err)
	}
}

func TestKeyParsing(t *testing.T) {
	privPEM, pubPEM := keys(t)
	if _, err := ParsePublicKey(privPEM); err == nil {
		t.Error("a private key was accepted as the public key")
	}
	if _, err := ParsePrivateKey(pubPEM); err == nil {
		t.Error("a public key was accepted as the private key")
	}
	if _, err := ParsePublicKey([]byte("not pem")); err == nil {
		t.Error("garbage was accepted as a public key")
	}
}

// FuzzDecode: whatever the file holds, Decode answers an error or a verified message, and
// never panics.
func FuzzDecode(f *testing.F) {
	privPEM, pubPEM := keys(f)
	priv, _ := ParsePrivateKey(privPEM)
	pub, _ := ParsePublicKey(pubPEM)
	data, _ := Encode(priv, "db-1", sample())
	f.Add(data)
	f.Add([]byte(magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := Decode(pub, b)
		if err == nil && msg == nil {
			t.Fatal("no error and no message")
		}
	})
}
