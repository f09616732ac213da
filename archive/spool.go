package archive

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/journal"
)

// ErrSpoolInUse means another live process holds the archive spool of this name. It is
// journal.ErrInUse, as flight.ErrSpoolInUse is.
var ErrSpoolInUse = journal.ErrInUse

// errNoKey marks a spool line without a key, which is skipped.
var errNoKey = errors.New("archive: spool line without a key")

// spool keeps outcomes the database could not take yet in archive-<name>.jsonl, one
// fsynced JSON line each. archive-<name>.lock locks it while its process lives. Methods
// are safe for concurrent use.
type spool struct {
	j *journal.Journal[flight.Archived]
	n atomic.Int64 // outcomes in the file
}

// archivedCodec is the spool's journal.Codec. It encodes a flight.Archived as JSON.
type archivedCodec struct{}

func (archivedCodec) Encode(a flight.Archived) ([]byte, error) { return json.Marshal(a) }

func (archivedCodec) Decode(line []byte) (flight.Archived, error) {
	var a flight.Archived
	if err := json.Unmarshal(line, &a); err != nil {
		return a, err
	}
	if a.Key == "" {
		return a, errNoKey
	}
	return a, nil
}

// openSpool opens or creates the archive spool of name in dir. It then adopts the archive
// spools in dir that no live process holds: their outcomes are appended to this one and
// their files removed. The token fence refuses an outcome written twice.
func openSpool(dir, name string) (*spool, error) {
	j, err := journal.OpenDir[flight.Archived](dir, "archive", name, archivedCodec{})
	if err != nil {
		return nil, fmt.Errorf("archive: spool: %w", err)
	}
	_, _ = j.Adopt() // a spool it cannot adopt stays where it is
	b, err := j.Read(0)
	if err != nil {
		_ = j.Close(false)
		return nil, fmt.Errorf("archive: spool: %w", err)
	}
	s := &spool{j: j}
	s.n.Store(int64(len(b.Records)))
	return s, nil
}

// add appends outcomes and fsyncs the file.
func (s *spool) add(outs []flight.Archived) error {
	if err := s.j.Append(outs...); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	s.n.Add(int64(len(outs)))
	return nil
}

// take returns up to limit of the oldest spooled outcomes. Calling done with true removes
// them from the file, and outcomes added meanwhile stay. Calling it with false keeps them.
func (s *spool) take(limit int) (outs []flight.Archived, done func(written bool) error, err error) {
	b, err := s.j.Read(limit)
	if err != nil || len(b.Records) == 0 {
		return nil, func(bool) error { return nil }, err
	}
	return b.Records, func(written bool) error {
		if !written {
			return nil
		}
		if err := s.j.Drop(b); err != nil {
			return fmt.Errorf("archive: spool: %w", err)
		}
		s.n.Add(-int64(len(b.Records)))
		return nil
	}, nil
}

// len returns how many outcomes wait in the spool.
func (s *spool) len() int { return int(max(s.n.Load(), 0)) }

// close releases the spool's lock. The file stays for the next process of this name, or
// for any process that adopts it.
func (s *spool) close() error { return s.j.Close(false) }
