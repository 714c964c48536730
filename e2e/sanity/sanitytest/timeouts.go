package sanitytest

import (
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
)

var cephTimeouts = ceph.Timeouts{Connect: 10 * time.Second, Op: 30 * time.Second}
