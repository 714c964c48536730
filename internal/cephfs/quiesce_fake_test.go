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
//
// With passthrough set (a cluster whose manager has `fs quiesce`, Ceph 19.2+), the calls are
// recorded and then answered by the real manager: the same test then proves the real pause.
type squidMgr struct {
	real        mgrAPI
	passthrough bool

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
	// answered is the set's version in the manager's answer (what a release must name)
	answered int64
}

func newSquidMgr() *squidMgr { return &squidMgr{real: cephMgr{}, sets: map[string]*fakeSet{}} }

func (m *squidMgr) CommandTable(ctx context.Context, mgr *ceph.Conn) (ceph.CommandTable, error) {
	t, err := m.real.CommandTable(ctx, mgr)
	if err != nil || m.passthrough {
		return t, err
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
	if m.passthrough {
		return m.forward(ctx, mgr, cmd, call, req.Release, req.SetID)
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
		call.answered = set.version
		m.log[len(m.log)-1] = call
		return reply(req.SetID, set), nil
	}
	call.op = "quiesce"
	if set == nil {
		set = &fakeSet{}
		m.sets[req.SetID] = set
	}
	set.members, set.state, set.version = req.Members, "QUIESCED", set.version+1
	call.answered = set.version
	m.log = append(m.log, call)
	return reply(req.SetID, set), nil
}

// forward records a call and has the real manager answer it (m.mu held).
func (m *squidMgr) forward(ctx context.Context, mgr *ceph.Conn, cmd map[string]any, call quiesceCall, release bool, set string) ([]byte, error) {
	call.op = map[bool]string{true: "release", false: "quiesce"}[release]
	out, err := m.real.Command(ctx, mgr, cmd)
	if err == nil {
		var r struct {
			Sets map[string]struct {
				Version int64 `json:"version"`
			} `json:"sets"`
		}
		if json.Unmarshal(out, &r) == nil {
			call.answered = r.Sets[set].Version
		}
	}
	m.log = append(m.log, call)
	return out, err
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
