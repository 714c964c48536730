// Package rbdcaps tells what the librbd this process runs with offers beyond what it was
// built against: go-ceph's build tag names the oldest Ceph C API the binary may call, and newer
// calls are looked up in the loaded library at run time, as go-ceph does for its own by-ID
// calls. One binary built for Pacific thereby uses Reef's and Squid's calls when it runs with
// their libraries, and falls back where it does not.
package rbdcaps

/*
#cgo LDFLAGS: -ldl -lrbd
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <rbd/librbd.h>

static void *rbdcaps_lookup(const char *name) {
	dlerror();
	return dlsym(RTLD_DEFAULT, name);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Symbols of librbd calls newer than Pacific that monoceph uses when present.
const (
	// DiffIterate3 is rbd_diff_iterate3: diffs from a snapshot given by ID, so also from the
	// snapshots of group snapshots (Ceph 18.2.5+, 19.2.3+, 20.2+).
	DiffIterate3 = "rbd_diff_iterate3"
	// Clone4 is rbd_clone4: clones from a snapshot given by ID, so also from the snapshots of
	// group snapshots (Ceph 19.2+).
	Clone4 = "rbd_clone4"
)

var (
	mu    sync.Mutex
	found = map[string]unsafe.Pointer{}
)

// Lookup returns the address of librbd's function name, or nil when the loaded library lacks
// it. Results are cached: the library does not change while the process runs.
func Lookup(name string) unsafe.Pointer {
	mu.Lock()
	defer mu.Unlock()
	if p, ok := found[name]; ok {
		return p
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	p := C.rbdcaps_lookup(cname)
	found[name] = p
	return p
}

// Has reports whether the loaded librbd has the function name.
func Has(name string) bool {
	libraryVersion() // a call into librbd keeps the library linked where nothing else does
	return Lookup(name) != nil
}

// libraryVersion is librbd's own version (not Ceph's: 1.16.0 on Pacific 16.2).
func libraryVersion() string {
	var major, minor, extra C.int
	C.rbd_version(&major, &minor, &extra)
	return fmt.Sprintf("%d.%d.%d", major, minor, extra)
}
