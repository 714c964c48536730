package cephfs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
)

// squidMgr plays a Ceph 19.2+ manager on the local (older) cluster: its command table has
// `fs quiesce`, which it answers itself from the sets it keeps; every other command goes to the
// real manager. The pause itself is not real (an older MDS cannot quiesce), so tests with it
// check the driver's steps, their order and its error handling, not the consistency that the
// RBD tests and the e2e test check with running writers.
type squidMgr struct {
	real mgrAPI

	mu   sync.Mutex
	sets map[string]*fakeSet
	log  []quiesceCall
	// releaseAs, when set, is the state a release finds its set in (EXPIRED: the members were
	// let go before the driver released them)
	releaseAs string
}

type fakeSet struct {
	version int64
	state   string
	members []string
}

type quiesceCall struct {
	at      time.Time
	op      string // quiesce, release
	set     string
	members []string
	version int64
	timeout string // as sent: the manager wants float literals
}

func newSquidMgr() *squidMgr { return &squidMgr{real: cephMgr{}, sets: map[string]*fakeSet{}} }

func (m *squidMgr) CommandTable(ctx context.Context, mgr *ceph.Conn) (ceph.CommandTable, error) {
	t, err := m.real.CommandTable(ctx, mgr)
	if err != nil {
		return nil, err
	}
	return append(t, ceph.CommandSignature{Words: []string{"fs", "quiesce"}, Args: []string{"vol_name", "members", "set_id", "timeout", "expiration", "await", "release", "if_version"}}), nil
}

func (m *squidMgr) Command(ctx context.Context, mgr *ceph.Conn, cmd map[string]any) ([]byte, error) {
	if cmd["prefix"] != "fs quiesce" {
		return m.real.Command(ctx, mgr, cmd)
	}
	raw, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	var req struct {
		Members   []string         `json:"members"`
		SetID     string           `json:"set_id"`
		Timeout   *json.RawMessage `json:"timeout"`
		Release   bool             `json:"release"`
		IfVersion int64            `json:"if_version"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	call := quiesceCall{at: time.Now(), set: req.SetID, members: req.Members, version: req.IfVersion}
	if req.Timeout != nil {
		call.timeout = string(*req.Timeout)
	}
	set := m.sets[req.SetID]
	if req.Release {
		call.op = "release"
		m.log = append(m.log, call)
		if set == nil {
			return nil, ceph.NewError("fs quiesce", ceph.ErrNotFound, "no set "+req.SetID)
		}
		if req.IfVersion != 0 && req.IfVersion != set.version {
			return nil, ceph.NewError("fs quiesce", ceph.ErrInvalid, "ESTALE") // what a newer manager answers: the set changed
		}
		if m.releaseAs != "" {
			set.state = m.releaseAs
			return nil, ceph.NewError("fs quiesce", ceph.ErrPermission, "set "+req.SetID+" is "+set.state)
		}
		set.state, set.version = "RELEASED", set.version+1
		return reply(req.SetID, set), nil
	}
	call.op = "quiesce"
	m.log = append(m.log, call)
	if set == nil {
		set = &fakeSet{}
		m.sets[req.SetID] = set
	}
	set.members, set.state, set.version = req.Members, "QUIESCED", set.version+1
	return reply(req.SetID, set), nil
}

func reply(id string, s *fakeSet) []byte {
	return []byte(fmt.Sprintf(`{"epoch":3,"set_version":%d,"sets":{%q:{"version":%d,"age_ref":0.5,"state":{"name":%q,"age":0.1},"timeout":60.0,"expiration":60.0,"members":{}}}}`,
		s.version, id, s.version, s.state))
}

func (m *squidMgr) calls() []quiesceCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]quiesceCall(nil), m.log...)
}
