package controller

import (
	"fmt"
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/classparam"
)

func TestClassUsers(t *testing.T) {
	cred := func(id string) ceph.Credentials {
		c, err := ceph.NewCredentials(id, "AQAAAAAAAAAAABAAbW9ub2NlcGgtc2VjcmV0IQ==")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	u := NewClassUsers()
	u.Remember(map[string]string{"clusterID": "c", "pool": "a", classparam.ReservedPrefix + "pvc/name": "pvc-1"}, cred("alice"))
	u.Remember(map[string]string{"clusterID": "c", "pool": "b"}, cred("bob"))
	for _, tt := range []struct {
		name   string
		params map[string]string
		want   string // user ID; "" for none
	}{
		{"GetCapacity's parameters, with the provisioner's keys", map[string]string{"clusterID": "c", "pool": "a",
			classparam.ReservedPrefix + "provisioner-secret-name": "s", classparam.ReservedPrefix + "provisioner-secret-namespace": "n"}, "alice"},
		{"another class", map[string]string{"clusterID": "c", "pool": "b"}, "bob"},
		{"a class with one more parameter", map[string]string{"clusterID": "c", "pool": "a", "dataPool": "ec"}, ""},
		{"a class with one parameter less", map[string]string{"clusterID": "c"}, ""},
		{"a value that joins differently", map[string]string{"clusterID": "c\x00pool=a"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := u.Lookup(tt.params)
			if ok != (tt.want != "") || got.ID != tt.want {
				t.Fatalf("Lookup = %q, %v; want %q", got.ID, ok, tt.want)
			}
		})
	}

	// a newer CreateVolume of a class replaces its user; the oldest class is forgotten first
	u.Remember(map[string]string{"clusterID": "c", "pool": "a"}, cred("carol"))
	for i := range maxClassUsers - 1 {
		u.Remember(map[string]string{"clusterID": "c", "pool": fmt.Sprint("p", i)}, cred("dave"))
	}
	if _, ok := u.Lookup(map[string]string{"clusterID": "c", "pool": "b"}); ok {
		t.Error("the oldest class was kept past the bound")
	}
	if got, ok := u.Lookup(map[string]string{"clusterID": "c", "pool": "a"}); !ok || got.ID != "carol" {
		t.Errorf("class a: %q, %v; want carol, remembered last", got.ID, ok)
	}
	var none *ClassUsers
	none.Remember(map[string]string{"pool": "a"}, cred("x"))
	if _, ok := none.Lookup(map[string]string{"pool": "a"}); ok {
		t.Error("a nil ClassUsers remembered")
	}
}
