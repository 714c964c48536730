package attach

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/fusefile"
	"golang.org/x/sys/unix"
)

// TestImageHandleField: aio reads need go-ceph's private handle field; a go-ceph that renames
// or retypes it must fail here, not silently fall back to synchronous reads.
func TestImageHandleField(t *testing.T) {
	if _, err := imageHandle(&rbd.Image{}); err == nil || err.Error() != "image not open" {
		t.Fatalf("imageHandle of a closed image: %v, want the field found and the image not open", err)
	}
}

// TestImageBackend: only an image with aio is served as an AsyncReader; without it the
// server's pooled synchronous reads beat a fallback that allocates a buffer per read.
func TestImageBackend(t *testing.T) {
	tests := []struct {
		name  string
		aio   *aioReader
		async bool
	}{{"with aio", &aioReader{}, true}, {"without aio", nil, false}}
	for _, tc := range tests {
		b := (&openImage{aio: tc.aio}).backend()
		if _, async := b.(fusefile.AsyncReader); async != tc.async {
			t.Errorf("%s: AsyncReader %t, want %t", tc.name, async, tc.async)
		}
		if _, discards := b.(fusefile.Discarder); !discards {
			t.Errorf("%s: not a Discarder", tc.name)
		}
	}
}

// TestAIOReads reads a real image through ReadAsync, many reads at once (more than there are
// slots: the rest are read synchronously), and checks every byte, the image's end and the
// close.
func TestAIOReads(t *testing.T) {
	r := newFuseRig(t, "")
	const size = 32 << 20
	want := make([]byte, size)
	if _, err := rand.Read(want); err != nil {
		t.Fatal(err)
	}
	if err := r.onImage(func(ioctx *rados.IOContext) error {
		img, err := rbd.OpenImage(ioctx, r.req.Image.Name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		if _, err := img.WriteAt(want, 0); err != nil {
			img.Close()
			return err
		}
		aio, err := newAIOReader(img)
		if err != nil {
			img.Close()
			return err
		}
		o := aioImage{&openImage{img: img, aio: aio, spec: r.req.Image.Spec()}}

		tests := []struct {
			name      string
			off, size int64
			want      []byte
		}{
			{"4 KiB", 4096, 4096, want[4096:8192]},
			{"1 MiB across objects", 4<<20 - 512<<10, 1 << 20, want[4<<20-512<<10 : 4<<20+512<<10]},
			{"unaligned", 12345, 777, want[12345 : 12345+777]},
			{"past the end", size - 100, 4096, want[size-100:]},
			{"at the end", size, 4096, nil},
			{"after the end", size + 1<<20, 4096, nil},
		}
		for _, tc := range tests {
			var got []byte
			var gotErr error
			ch := make(chan struct{})
			if err := o.ReadAsync(tc.off, int(tc.size), func(p []byte, err error) {
				got, gotErr = bytes.Clone(p), err
				close(ch)
			}); err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			<-ch
			if gotErr != nil && !(tc.want == nil && errors.Is(gotErr, io.EOF)) {
				t.Errorf("%s: %v", tc.name, gotErr)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("%s: read %d bytes, want %d, equal to what was written: %t", tc.name, len(got), len(tc.want), false)
			}
		}

		// 3×aioSlots reads at once, 64 KiB each: every one must come back with its own bytes
		var wg sync.WaitGroup
		var mu sync.Mutex
		bad := 0
		for i := 0; i < 3*aioSlots; i++ {
			off := int64(i) * 64 << 10
			wg.Add(1)
			if err := o.ReadAsync(off, 64<<10, func(p []byte, err error) {
				defer wg.Done()
				if err != nil || !bytes.Equal(p, want[off:off+64<<10]) {
					mu.Lock()
					bad++
					mu.Unlock()
				}
			}); err != nil {
				wg.Done()
				t.Error(err)
			}
		}
		wg.Wait()
		if bad > 0 {
			t.Errorf("%d of %d concurrent reads returned wrong bytes or failed", bad, 3*aioSlots)
		}
		err = img.Close()
		aio.close() // the completion goroutine has ended: every slot is back
		aio.mu.Lock()
		defer aio.mu.Unlock()
		if len(aio.free) != aioSlots {
			t.Errorf("%d slots free after every read completed, want %d", len(aio.free), aioSlots)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestAIOCloseDrains: rbd_close does not wait for completion callbacks, so close must wait
// for every slot in flight to come back before it closes the pipe the callbacks write to and
// frees their slots; when they never come back, it leaves both allocated. A slot is taken
// as start takes it and given back as finish does, with no image (nothing reaches librbd).
func TestAIOCloseDrains(t *testing.T) {
	defer func(d time.Duration) { drainTimeout = d }(drainTimeout)
	tests := []struct {
		name     string
		giveBack bool // the slot comes back while close waits
	}{{"slot comes back", true}, {"slot never comes back", false}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drainTimeout = 300 * time.Millisecond
			if tc.giveBack {
				drainTimeout = time.Minute
			}
			a, err := newAIO(nil)
			if err != nil {
				t.Fatal(err)
			}
			a.mu.Lock()
			n := a.free[len(a.free)-1]
			a.free = a.free[:len(a.free)-1]
			a.mu.Unlock()

			closed := make(chan error, 1)
			go func() { closed <- a.close() }()
			select {
			case err := <-closed:
				if tc.giveBack {
					t.Fatalf("close returned (%v) while a read was in flight", err)
				}
			case <-time.After(100 * time.Millisecond):
			}
			// the completion callback could still run: the pipe's write end must be open
			// (a slot number out of range, which the completion goroutine skips)
			b := [4]byte{0xff, 0xff, 0xff, 0xff}
			if _, err := unix.Write(a.w, b[:]); err != nil {
				t.Fatalf("writing to the completion pipe as a late callback would: %v", err)
			}
			if tc.giveBack {
				a.put(n)
			}
			err = <-closed
			switch {
			case tc.giveBack && (err != nil || a.cmem != nil):
				t.Errorf("close after the slot came back: %v, slots freed: %t", err, a.cmem == nil)
			case !tc.giveBack && (err == nil || a.cmem == nil):
				t.Errorf("close with a slot out: %v, slots kept: %t", err, a.cmem != nil)
			}
		})
	}
}
