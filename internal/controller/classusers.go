package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/classparam"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxClassUsers bounds what ClassUsers remembers; a cluster has a handful of StorageClasses.
const maxClassUsers = 256

// ClassUsers remembers the Ceph user each StorageClass's CreateVolume calls carry, so that
// GetCapacity, which carries no secrets, asks Ceph as that user: not as whichever user the
// process happens to hold a connection of (another tenant's, a fencing user's), which could
// answer with another user's rights, or fail for lack of them, depending on which it found. A
// StorageClass is known by its parameters without the reserved keys: GetCapacity gets the
// class's parameters as they are, CreateVolume the same without the sidecars' keys.
type ClassUsers struct {
	mu    sync.Mutex
	users map[string]ceph.Credentials
	order []string // oldest first, for eviction
}

// NewClassUsers returns an empty memory.
func NewClassUsers() *ClassUsers { return &ClassUsers{users: map[string]ceph.Credentials{}} }

// classKey is the parameters without reserved keys, in a canonical form (encoding/json writes
// map keys sorted, and escapes what could be mistaken for a separator).
func classKey(params map[string]string) string {
	own := make(map[string]string, len(params))
	for k, v := range params {
		if !strings.HasPrefix(k, classparam.ReservedPrefix) {
			own[k] = v
		}
	}
	b, _ := json.Marshal(own) // a map of strings always encodes
	return string(b)
}

// Remember records cred as the user of the StorageClass with params.
func (u *ClassUsers) Remember(params map[string]string, cred ceph.Credentials) {
	if u == nil {
		return
	}
	key := classKey(params)
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.users[key]; ok {
		u.order = slices.DeleteFunc(u.order, func(k string) bool { return k == key })
	} else if len(u.order) >= maxClassUsers {
		delete(u.users, u.order[0])
		u.order = u.order[1:]
	}
	u.users[key] = cred
	u.order = append(u.order, key)
}

// Lookup returns the user of the StorageClass with params.
func (u *ClassUsers) Lookup(params map[string]string) (ceph.Credentials, bool) {
	if u == nil {
		return ceph.Credentials{}, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	cred, ok := u.users[classKey(params)]
	return cred, ok
}

// RememberClassUser records the user of a CreateVolume's secrets as its StorageClass's, once
// those secrets got a connection.
func (b Base) RememberClassUser(params, secrets map[string]string) {
	if cred, err := ceph.CredentialsFromSecrets(secrets, b.SecretOrder...); err == nil {
		b.Users.Remember(params, cred)
	}
}

// ConnectAsClass connects to cl as the user of the StorageClass with params (GetCapacity);
// UNAVAILABLE until a CreateVolume of that class has run in this process.
func (b Base) ConnectAsClass(ctx context.Context, cl v1.Cluster, params map[string]string) (*ceph.Conn, error) {
	cred, ok := b.Users.Lookup(params)
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "no CreateVolume of this StorageClass has run in this process yet: GetCapacity carries no secrets and asks Ceph as the user the class's CreateVolume calls carry")
	}
	return b.Pool.Get(ctx, cl.MonHost(), cred)
}
