package ceph_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// TestAES256KKeys: a user with the key type Ceph 20.2.4 makes by default (aes256k) works where
// this process's librados reads such keys (Tentacle's), and where it does not (Pacific's,
// Reef's) the connection fails at once as ErrAuth saying why, not with librados' "keyring not
// found". Only a cluster that makes aes256k keys (Tentacle) can give one; older monitors
// ignore the key_type argument and make an aes key.
func TestAES256KKeys(t *testing.T) {
	cl := cephtest.Env(t)
	p := newPool(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Release()
	t.Logf("this librados reads aes256k keys: %v", ceph.ReadsAES256KKeys())
	entity := fmt.Sprintf("client.aes256k-%d", time.Now().UnixNano()%1e9)
	out, err := ceph.MonCommand(ctx, admin, map[string]any{"prefix": "auth get-or-create", "entity": entity,
		"caps": []string{"mon", "allow r"}, "key_type": "aes256k", "format": "json"})
	if err != nil {
		t.Logf("the monitors make no aes256k keys (%v): nothing more to check", err)
		return
	}
	t.Cleanup(func() {
		_, _ = ceph.MonCommand(context.Background(), admin, map[string]any{"prefix": "auth del", "entity": entity})
	})
	var users []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &users); err != nil || len(users) != 1 {
		t.Fatalf("auth get-or-create: %v", err)
	}
	if raw, err := base64.StdEncoding.DecodeString(users[0].Key); err != nil || len(raw) < 2 || raw[0] != 2 {
		t.Logf("the monitors made no aes256k key (older monitors ignore key_type): nothing more to check")
		return
	}
	cred, err := ceph.NewCredentials(strings.TrimPrefix(entity, "client."), users[0].Key)
	if err != nil {
		t.Fatalf("an aes256k key from the monitors is refused: %v", err)
	}
	start := time.Now()
	c, err := p.Get(ctx, cl.Monitors, cred)
	if ceph.ReadsAES256KKeys() {
		if err != nil {
			t.Fatalf("connecting with an aes256k key: %v", err)
		}
		defer c.Release()
		if _, err := ceph.MonCommand(ctx, c, map[string]any{"prefix": "mon stat"}); err != nil {
			t.Fatalf("mon stat as %s: %v", entity, err)
		}
		return
	}
	if !errors.Is(err, ceph.ErrAuth) || !strings.Contains(err.Error(), "aes256k") || time.Since(start) > time.Second {
		t.Fatalf("an aes256k key with libraries that cannot read it: %v after %v, want ErrAuth naming aes256k at once", err, time.Since(start))
	}
	t.Logf("as expected: %v", err)
}
