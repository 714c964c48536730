package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// CommandSignature is one command of a daemon's command table (get_command_descriptions):
// what a monitor or manager of this cluster accepts. Features newer than the oldest supported
// release are detected here, not by guessing from errors: an unknown command is EINVAL, like a
// bad argument, and some old monitors accept newer syntax with another meaning.
type CommandSignature struct {
	Words []string // the fixed words, e.g. "osd", "blocklist"
	Args  []string // the names of its arguments
}

// Has reports whether the command takes an argument named arg.
func (s CommandSignature) Has(arg string) bool { return slices.Contains(s.Args, arg) }

// CommandTable is a daemon's command table.
type CommandTable []CommandSignature

// ParseCommandTable decodes the answer of get_command_descriptions.
func ParseCommandTable(out []byte) (CommandTable, error) {
	var raw map[string]struct {
		Sig []json.RawMessage `json:"sig"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("decode get_command_descriptions: %w", err)
	}
	table := make(CommandTable, 0, len(raw))
	for _, cmd := range raw {
		var s CommandSignature
		for _, part := range cmd.Sig {
			var word string
			if json.Unmarshal(part, &word) == nil {
				s.Words = append(s.Words, word)
				continue
			}
			var arg struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(part, &arg) == nil && arg.Name != "" {
				s.Args = append(s.Args, arg.Name)
			}
		}
		table = append(table, s)
	}
	return table, nil
}

// Find returns the command whose fixed words are exactly words.
func (t CommandTable) Find(words ...string) (CommandSignature, bool) {
	for _, s := range t {
		if slices.Equal(s.Words, words) {
			return s, true
		}
	}
	return CommandSignature{}, false
}

var commandTableRequest = []byte(`{"prefix":"get_command_descriptions"}`)

// MonCommandTable reads the monitors' command table.
func MonCommandTable(ctx context.Context, c *Conn) (CommandTable, error) {
	out, err := MonCommandRaw(ctx, c, "get_command_descriptions", commandTableRequest)
	if err != nil {
		return nil, err
	}
	return ParseCommandTable(out)
}

// MgrCommandTable reads the active manager's command table (its modules' commands, such as the
// volumes module's). c must come from Pool.GetForMgr.
func MgrCommandTable(ctx context.Context, c *Conn) (CommandTable, error) {
	if err := c.mgrOK(); err != nil {
		return nil, err
	}
	out, err := command(ctx, c, "get_command_descriptions", commandTableRequest, sendMgr)
	if err != nil {
		return nil, err
	}
	return ParseCommandTable(out)
}
