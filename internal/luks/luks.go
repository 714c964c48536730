// Package luks changes the key slots of a LUKS2 header held in memory, a copy of an encrypted
// image's first bytes, with the libcryptsetup that librbd itself links (opened with dlopen: no
// headers, no cryptsetup command, no key on a command line or in a file).
package luks

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The few libcryptsetup 2.x entry points used, declared here: Debian ships the library with
// librbd (libcryptsetup12) but not its headers (libcryptsetup-dev). Their ABI is stable across
// libcryptsetup.so.12.
struct crypt_device;

typedef int (*mc_init_fn)(struct crypt_device **, const char *);
typedef int (*mc_load_fn)(struct crypt_device *, const char *, void *);
typedef int (*mc_activate_fn)(struct crypt_device *, const char *, int, const char *, size_t, uint32_t);
typedef int (*mc_add_fn)(struct crypt_device *, int, const char *, size_t, const char *, size_t);
typedef int (*mc_destroy_fn)(struct crypt_device *, int);
typedef int (*mc_status_fn)(struct crypt_device *, int);
typedef int (*mc_max_fn)(const char *);
typedef void (*mc_free_fn)(struct crypt_device *);

static mc_init_fn mc_init_p;
static mc_load_fn mc_load_p;
static mc_activate_fn mc_activate_p;
static mc_add_fn mc_add_p;
static mc_destroy_fn mc_destroy_p;
static mc_status_fn mc_status_p;
static mc_max_fn mc_max_p;
static mc_free_fn mc_free_p;

// mc_open loads the library once (the caller serialises it); NULL or what is missing.
static const char *mc_open(const char *soname) {
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		return dlerror();
	}
	// a library without one of them is closed again (the pointers taken so far are not used:
	// load() fails for good)
#define MC_SYM(var, type, name) var = (type)dlsym(h, name); if (var == NULL) { dlclose(h); return "symbol " name " missing"; }
	MC_SYM(mc_init_p, mc_init_fn, "crypt_init");
	MC_SYM(mc_load_p, mc_load_fn, "crypt_load");
	MC_SYM(mc_activate_p, mc_activate_fn, "crypt_activate_by_passphrase");
	MC_SYM(mc_add_p, mc_add_fn, "crypt_keyslot_add_by_passphrase");
	MC_SYM(mc_destroy_p, mc_destroy_fn, "crypt_keyslot_destroy");
	MC_SYM(mc_status_p, mc_status_fn, "crypt_keyslot_status");
	MC_SYM(mc_max_p, mc_max_fn, "crypt_keyslot_max");
	MC_SYM(mc_free_p, mc_free_fn, "crypt_free");
#undef MC_SYM
	return NULL;
}

static int mc_init(struct crypt_device **cd, const char *path) { return mc_init_p(cd, path); }
static int mc_load(struct crypt_device *cd) { return mc_load_p(cd, "LUKS2", NULL); }
// a NULL name only checks the passphrase: nothing is activated (no device mapper)
static int mc_check(struct crypt_device *cd, const char *p, size_t n) { return mc_activate_p(cd, NULL, -1, p, n, 0); }
static int mc_add(struct crypt_device *cd, const char *o, size_t on, const char *p, size_t n) { return mc_add_p(cd, -1, o, on, p, n); }
static int mc_destroy(struct crypt_device *cd, int slot) { return mc_destroy_p(cd, slot); }
static int mc_status(struct crypt_device *cd, int slot) { return mc_status_p(cd, slot); }
static int mc_max(void) { return mc_max_p("LUKS2"); }
static void mc_free(struct crypt_device *cd) { mc_free_p(cd); }

// mc_secret copies a key into C memory (Go's may move, and is not wiped).
static char *mc_secret(const void *p, size_t n) {
	char *c = malloc(n > 0 ? n : 1);
	if (c != NULL && n > 0) {
		memcpy(c, p, n);
	}
	return c;
}

static void mc_wipe(char *c, size_t n) {
	if (c != NULL) {
		explicit_bzero(c, n);
		free(c);
	}
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Library is the libcryptsetup librbd links on Debian (libcryptsetup12).
const Library = "libcryptsetup.so.12"

// ErrWrongKey: no key slot opens with the key.
var ErrWrongKey = errors.New("the key opens no key slot of the LUKS header")

var lib struct {
	once sync.Once
	err  error
}

func load() error {
	lib.once.Do(func() {
		name := C.CString(Library)
		defer C.free(unsafe.Pointer(name))
		if msg := C.mc_open(name); msg != nil {
			lib.err = fmt.Errorf("loading %s (librbd's LUKS library): %s", Library, C.GoString(msg))
		}
	})
	return lib.err
}

// Header is a LUKS2 header in an anonymous memory file (memfd), as librbd's own LUKS code
// keeps one: libcryptsetup works on a path, /proc/self/fd/N, and nothing reaches a disk.
// Not safe for concurrent use.
type Header struct {
	f    *os.File
	cd   *C.struct_crypt_device
	size int
}

// Load reads a LUKS2 header (the bytes the image's data starts after).
func Load(b []byte) (*Header, error) {
	if err := load(); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("monoceph-luks", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	h := &Header{f: os.NewFile(uintptr(fd), "luks-header"), size: len(b)}
	if _, err := h.f.WriteAt(b, 0); err != nil {
		h.Close()
		return nil, fmt.Errorf("copying the LUKS header to memory: %w", err)
	}
	path := C.CString(fmt.Sprintf("/proc/self/fd/%d", fd))
	defer C.free(unsafe.Pointer(path))
	if r := C.mc_init(&h.cd, path); r < 0 {
		h.Close()
		return nil, fmt.Errorf("crypt_init: %w", syscall.Errno(-r))
	}
	if r := C.mc_load(h.cd); r < 0 {
		h.Close()
		return nil, fmt.Errorf("crypt_load: not a LUKS2 header: %w", syscall.Errno(-r))
	}
	return h, nil
}

// Close frees the header (the memory file goes with it).
func (h *Header) Close() {
	if h.cd != nil {
		C.mc_free(h.cd)
		h.cd = nil
	}
	if h.f != nil {
		_ = h.f.Close()
		h.f = nil
	}
}

// withKeys runs fn with copies of keys in C memory, wiped after; -ENOMEM without fn when a
// copy cannot be made (a NULL key would be no key to libcryptsetup, not an error).
func withKeys(keys [][]byte, fn func(c []*C.char) C.int) C.int {
	c := make([]*C.char, len(keys))
	defer func() {
		for i, k := range keys {
			C.mc_wipe(c[i], C.size_t(len(k))) // NULL: nothing to wipe
		}
	}()
	for i, k := range keys {
		var p unsafe.Pointer
		if len(k) > 0 {
			p = unsafe.Pointer(&k[0])
		}
		if c[i] = C.mc_secret(p, C.size_t(len(k))); c[i] == nil {
			return -C.int(syscall.ENOMEM)
		}
	}
	return fn(c)
}

// Unlock returns the key slot key opens (ErrWrongKey: none). It runs the slot's PBKDF:
// argon2id, seconds of CPU and up to 1 GiB.
func (h *Header) Unlock(key []byte) (int, error) {
	r := withKeys([][]byte{key}, func(c []*C.char) C.int { return C.mc_check(h.cd, c[0], C.size_t(len(key))) })
	return slot("checking a key", r)
}

// Add adds a key slot for key, unlocking the volume key with old; it returns the new slot.
// libcryptsetup writes the slot's area, then both JSON copies of the header.
func (h *Header) Add(old, key []byte) (int, error) {
	r := withKeys([][]byte{old, key}, func(c []*C.char) C.int {
		return C.mc_add(h.cd, c[0], C.size_t(len(old)), c[1], C.size_t(len(key)))
	})
	return slot("adding a key slot", r)
}

func slot(what string, r C.int) (int, error) {
	switch {
	case r >= 0:
		return int(r), nil
	case syscall.Errno(-r) == syscall.EPERM:
		return -1, ErrWrongKey
	}
	return -1, fmt.Errorf("%s: %w", what, syscall.Errno(-r))
}

// Slots lists the slots in use.
func (h *Header) Slots() []int {
	var out []int
	for i := range int(C.mc_max()) {
		// CRYPT_SLOT_ACTIVE (2), CRYPT_SLOT_ACTIVE_LAST (3); CRYPT_SLOT_UNBOUND (4) is a
		// slot without the volume key, which monoceph never makes but removes too
		if s := C.mc_status(h.cd, C.int(i)); s >= 2 {
			out = append(out, i)
		}
	}
	return out
}

// Destroy removes slot (its area wiped, then the JSON copies written without it).
func (h *Header) Destroy(slot int) error {
	if r := C.mc_destroy(h.cd, C.int(slot)); r < 0 {
		return fmt.Errorf("destroying key slot %d: %w", slot, syscall.Errno(-r))
	}
	return nil
}

// Bytes is the header as it is now.
func (h *Header) Bytes() ([]byte, error) {
	b := make([]byte, h.size)
	if _, err := h.f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("reading the LUKS header back: %w", err)
	}
	return b, nil
}

// Extent is a byte range of the header to write.
type Extent struct {
	Off int64
	Len int
}

// chunk is the granularity changes are found at.
const chunk = 4096

// binaryHeader is the binary part at the start of each header copy (LUKS2's 4 KiB struct
// luks2_hdr_disk), the JSON area follows it.
const binaryHeader = 4096

// Changes lists the extents where next differs from prev, in the order they must reach the
// image for every prefix of the writes to leave a header that opens with the keys of prev or
// of next: first everything past the two header copies (a new slot's area, which nothing
// references yet, or a destroyed slot's wiped area, which the copies may still reference
// only until the KMS stopped handing out its key), then the primary copy, then the secondary.
// A torn copy fails its checksum and libcryptsetup takes the other one. Within each copy the
// JSON area goes first and the 4 KiB binary header (its seqid and the checksum over both) last:
// binary header first and a kill before the JSON would leave a copy with the new seqid and the
// old JSON, which libcryptsetup takes for the newer copy, and later metadata writes (its own
// seqid checks) may then refuse the header, every retry included; JSON first leaves the old
// seqid on a copy whose checksum fails until its binary header lands.
func Changes(prev, next []byte) ([]Extent, error) {
	if len(prev) != len(next) {
		return nil, fmt.Errorf("header of %d bytes became %d", len(prev), len(next))
	}
	hdr, err := JSONCopyBytes(next)
	if err != nil {
		return nil, err
	}
	var out []Extent
	// add appends the changes in [from, to), merging neighbours only within the range: each
	// region is written on its own, in order
	add := func(from, to int) {
		first := len(out)
		for off := from; off < to; off += chunk {
			end := min(off+chunk, to)
			if string(prev[off:end]) == string(next[off:end]) {
				continue
			}
			if n := len(out); n > first && out[n-1].Off+int64(out[n-1].Len) == int64(off) {
				out[n-1].Len += end - off
				continue
			}
			out = append(out, Extent{Off: int64(off), Len: end - off})
		}
	}
	n := len(next)
	add(2*hdr, n)
	add(binaryHeader, hdr)
	add(0, binaryHeader)
	add(hdr+binaryHeader, 2*hdr)
	add(hdr, hdr+binaryHeader)
	return slices.Clip(out), nil
}

// magic starts the primary LUKS header.
var magic = []byte("LUKS\xba\xbe")

// JSONCopyBytes is the size of one copy of a LUKS2 header (binary header and JSON area):
// the primary is at 0, the secondary right after it.
func JSONCopyBytes(b []byte) (int, error) {
	if len(b) < 16 || string(b[:6]) != string(magic) || b[6] != 0 || b[7] != 2 {
		return 0, errors.New("not a LUKS2 header")
	}
	var size uint64
	for _, c := range b[8:16] {
		size = size<<8 | uint64(c)
	}
	if size < 4096 || size > uint64(len(b))/2 {
		return 0, fmt.Errorf("LUKS2 header size %d out of range", size)
	}
	return int(size), nil
}
