package snapmeta

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of Limits.
const (
	// DefaultMaxStreams and DefaultMaxStreamsPerUser bound the streams of the
	// Kubernetes-facing API: each open stream holds a goroutine, up to QueueDepth messages
	// and, while it runs, a diff iteration.
	DefaultMaxStreams        = 64
	DefaultMaxStreamsPerUser = 8
	// DefaultKeepaliveTime and DefaultKeepaliveTimeout: a connection silent this long is
	// pinged, and closed when the ping goes unanswered (a peer gone without a FIN, or one that
	// stopped reading its socket).
	DefaultKeepaliveTime    = time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	// DefaultMaxConnectionAge: then a connection is asked to go away (GOAWAY); its streams
	// get the longest stream duration to finish before it is closed.
	DefaultMaxConnectionAge = 30 * time.Minute
)

// Limits bound what the callers of the Kubernetes-facing API hold at once. Zero fields take
// the defaults above.
type Limits struct {
	MaxStreams        int
	MaxStreamsPerUser int
	KeepaliveTime     time.Duration
	KeepaliveTimeout  time.Duration
	MaxConnectionAge  time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxStreams <= 0 {
		l.MaxStreams = DefaultMaxStreams
	}
	if l.MaxStreamsPerUser <= 0 {
		l.MaxStreamsPerUser = DefaultMaxStreamsPerUser
	}
	if l.KeepaliveTime <= 0 {
		l.KeepaliveTime = DefaultKeepaliveTime
	}
	if l.KeepaliveTimeout <= 0 {
		l.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if l.MaxConnectionAge <= 0 {
		l.MaxConnectionAge = DefaultMaxConnectionAge
	}
	return l
}

// streamSlots count open streams in all and per authenticated user. They never wait: past a
// cap a stream is refused with RESOURCE_EXHAUSTED and the caller retries later.
type streamSlots struct {
	max, maxPerUser int

	mu     sync.Mutex
	open   int
	byUser map[string]int
}

func newStreamSlots(l Limits) *streamSlots {
	return &streamSlots{max: l.MaxStreams, maxPerUser: l.MaxStreamsPerUser, byUser: map[string]int{}}
}

// enter takes one of the slots every stream needs, before its caller is authenticated, so
// that anonymous callers cannot hold more than the cap either.
func (s *streamSlots) enter() (leave func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.max {
		return nil, status.Errorf(codes.ResourceExhausted, "%d changed block streams are open, the most this service allows at once; retry later", s.open)
	}
	s.open++
	return sync.OnceFunc(func() {
		s.mu.Lock()
		s.open--
		s.mu.Unlock()
	}), nil
}

// enterUser takes one of user's slots.
func (s *streamSlots) enterUser(user string) (leave func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.byUser[user]; n >= s.maxPerUser {
		return nil, status.Errorf(codes.ResourceExhausted, "%s has %d changed block streams open, the most one user may; retry later", user, n)
	}
	s.byUser[user]++
	return sync.OnceFunc(func() {
		s.mu.Lock()
		if s.byUser[user]--; s.byUser[user] == 0 {
			delete(s.byUser, user)
		}
		s.mu.Unlock()
	}), nil
}
