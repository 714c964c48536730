package snapmeta

import (
	"fmt"
)

// Extent is one byte range of a volume: changed or allocated, depending on the query.
type Extent struct {
	Offset int64
	Length int64
}

// End is the first byte after the extent.
func (e Extent) End() int64 { return e.Offset + e.Length }

func (e Extent) String() string { return fmt.Sprintf("%d+%d", e.Offset, e.Length) }

// Style is how extents are cut, the CSI BlockMetadataType.
type Style int

// Styles.
const (
	// Variable sends exact, coalesced byte ranges (VARIABLE_LENGTH).
	Variable Style = iota
	// Fixed sends whole blocks of one size (FIXED_LENGTH).
	Fixed
)

func (s Style) String() string {
	if s == Fixed {
		return "fixed"
	}
	return "variable"
}

// ParseStyle reads a style from configuration: "variable" or "fixed".
func ParseStyle(s string) (Style, error) {
	switch s {
	case "variable", "":
		return Variable, nil
	case "fixed":
		return Fixed, nil
	}
	return Variable, fmt.Errorf("block metadata style %q: want variable or fixed", s)
}

// assembler turns librbd's extents into the messages of a stream: it clips them to the
// starting offset, coalesces adjacent ones (or rounds them out to blocks), and hands each
// full message to emit. It refuses extents that go backwards rather than send a stream that
// breaks the spec's ordering rule.
type assembler struct {
	style     Style
	blockSize int64 // Fixed only
	start     int64 // nothing before this offset is sent
	max       int   // tuples per message
	emit      func([]Extent) error

	pending Extent // the run being coalesced; Length 0 when none
	sent    int64  // end of the last extent handed to emit
	batch   []Extent
	total   int64 // extents emitted
}

func newAssembler(style Style, blockSize, start int64, max int, emit func([]Extent) error) *assembler {
	if style == Fixed {
		start -= start % blockSize // the block containing the offset is sent whole
	}
	return &assembler{style: style, blockSize: blockSize, start: start, max: max, emit: emit,
		sent: start, batch: make([]Extent, 0, max)}
}

// add takes one extent as librbd reported it.
func (a *assembler) add(off, length int64) error {
	end := off + length
	if off < a.start {
		off = a.start
	}
	if end <= off {
		return nil
	}
	if a.style == Fixed {
		off -= off % a.blockSize
		if r := end % a.blockSize; r != 0 {
			end += a.blockSize - r
		}
	}
	if a.pending.Length > 0 {
		if off < a.pending.Offset {
			return fmt.Errorf("librbd reported extent %d+%d before %v: extents out of order", off, end-off, a.pending)
		}
		if off <= a.pending.End() {
			if end > a.pending.End() {
				a.pending.Length = end - a.pending.Offset
			}
			return nil
		}
		if err := a.release(); err != nil {
			return err
		}
	}
	if off < a.sent {
		return fmt.Errorf("librbd reported extent %d+%d, overlapping extents already sent (up to %d)", off, end-off, a.sent)
	}
	a.pending = Extent{Offset: off, Length: end - off}
	return nil
}

// release moves the pending run into the batch, as one extent or as its blocks.
func (a *assembler) release() error {
	p := a.pending
	a.pending = Extent{}
	if a.style == Variable {
		return a.push(p)
	}
	for o := p.Offset; o < p.End(); o += a.blockSize {
		if err := a.push(Extent{Offset: o, Length: a.blockSize}); err != nil {
			return err
		}
	}
	return nil
}

func (a *assembler) push(e Extent) error {
	a.batch = append(a.batch, e)
	a.sent = e.End()
	a.total++
	if len(a.batch) < a.max {
		return nil
	}
	b := a.batch
	// a new slice each time: the full one now belongs to the send loop
	a.batch = make([]Extent, 0, a.max)
	return a.emit(b)
}

// finish sends what is left. A stream with no extents at all still gets one (empty) message,
// so the client learns the volume's capacity and the block metadata type.
func (a *assembler) finish() error {
	if a.pending.Length > 0 {
		if err := a.release(); err != nil {
			return err
		}
	}
	if len(a.batch) > 0 || a.total == 0 {
		b := a.batch
		a.batch = nil
		return a.emit(b)
	}
	return nil
}
