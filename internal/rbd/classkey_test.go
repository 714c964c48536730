package rbd

import (
	"fmt"
	"strings"
	"testing"
)

func TestClassKeyRedacted(t *testing.T) {
	k := &classKey{kmsID: "meta", typ: "metadata", pass: []byte("correct horse battery staple")}
	for _, format := range []string{"%v", "%+v", "%s", "%#v"} {
		if out := fmt.Sprintf(format, k); strings.Contains(out, "horse") {
			t.Errorf("%s shows the passphrase: %s", format, out)
		}
	}
	if out := fmt.Sprintf("%v", *k); strings.Contains(out, "horse") || !strings.Contains(out, "meta") {
		t.Errorf("a classKey value prints %s", out)
	}
}
