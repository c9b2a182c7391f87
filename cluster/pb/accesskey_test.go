package pb

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"
)

func TestNonceRoundTripsAndBadOnesAreRefused(t *testing.T) {
	s := [16]byte{1, 2, 3}
	got, c, err := ParseNonce(FormatNonce(s, 42))
	if err != nil || got != s || c != 42 {
		t.Fatalf("%x %d %v", got, c, err)
	}
	for _, bad := range []string{"", "1", "zz.1", strings.Repeat("0", 32) + ".0", strings.Repeat("0", 32) + ".-1", strings.Repeat("0", 31) + ".1", strings.Repeat("0", 32) + "." + strings.Repeat("9", 21)} {
		if _, _, err := ParseNonce(bad); err == nil {
			t.Errorf("nonce %q parsed", bad)
		}
	}
}

// The signature covers every part: changing any one changes it.
func TestSignatureCoversEveryPart(t *testing.T) {
	d := sha256.Sum256([]byte("body"))
	base := Signature([]byte("secret-0123456789"), "k", "/m", "raftmq://c/broker/g/1", d, "1", "n")
	for name, sig := range map[string]string{
		"secret":   Signature([]byte("secret-0123456788"), "k", "/m", "raftmq://c/broker/g/1", d, "1", "n"),
		"key":      Signature([]byte("secret-0123456789"), "k2", "/m", "raftmq://c/broker/g/1", d, "1", "n"),
		"method":   Signature([]byte("secret-0123456789"), "k", "/m2", "raftmq://c/broker/g/1", d, "1", "n"),
		"resource": Signature([]byte("secret-0123456789"), "k", "/m", "raftmq://c/broker/g/2", d, "1", "n"),
		"body":     Signature([]byte("secret-0123456789"), "k", "/m", "raftmq://c/broker/g/1", sha256.Sum256(nil), "1", "n"),
		"time":     Signature([]byte("secret-0123456789"), "k", "/m", "raftmq://c/broker/g/1", d, "2", "n"),
		"nonce":    Signature([]byte("secret-0123456789"), "k", "/m", "raftmq://c/broker/g/1", d, "1", "n2"),
		// The parts are separated: moving a byte from one to the next is a change.
		"boundary": Signature([]byte("secret-0123456789"), "k/", "m", "raftmq://c/broker/g/1", d, "1", "n"),
	} {
		if sig == base {
			t.Errorf("changing the %s left the signature unchanged", name)
		}
	}
}

// BenchmarkBodyDigest is what signing adds on each side to a batched send
// (64 records of 1 KiB): a deterministic marshal and its SHA-256.
func BenchmarkBodyDigest(b *testing.B) {
	req := &SendMessageRequest{Topic: "bench", Records: bytes.Repeat([]byte{7}, 64*1100)}
	b.SetBytes(int64(len(req.Records)))
	for b.Loop() {
		if _, err := BodyDigest(req); err != nil {
			b.Fatal(err)
		}
	}
}
