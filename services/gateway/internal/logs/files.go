package logs

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kube5s/sless/pkg/funclog"
)

// Files reads the local driver's log files: one per function,
// <Dir>/<namespace>_<function>.log, the process's stdout and stderr
// together, appended by every process the function had.
type Files struct {
	Dir string
	// Interval is how often a follow looks for new bytes (a stat of a local
	// file); 250 ms when zero.
	Interval time.Duration
}

// maxScanBack bounds how far back from the end a tail looks for lines.
const maxScanBack = 64 << 20

// Path is the file of a function, as the operator's local driver names it.
func (f Files) Path(namespace, function string) string {
	return funclog.Path(f.Dir, namespace, function)
}

// Stream implements Source.
func (f Files) Stream(ctx context.Context, namespace, function string, opt Options, emit func(Record) error) error {
	name := namespace + "_" + function + ".log"
	if filepath.Base(name) != name { // names are DNS labels; never a path
		return errors.New("invalid function name")
	}
	path := f.Path(namespace, function)
	interval := f.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	file, err := os.Open(path)
	for errors.Is(err, fs.ErrNotExist) { // nothing printed yet
		if !opt.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		file, err = os.Open(path)
	}
	if err != nil {
		return err
	}
	defer func() { file.Close() }()

	start, err := tailOffset(file, opt.Tail)
	if err != nil {
		return err
	}
	if _, err := file.Seek(start, io.SeekStart); err != nil {
		return err
	}
	t := &lineReader{r: bufio.NewReaderSize(file, 32<<10), since: opt.Since, emit: emit, offset: start}
	for {
		if err := t.drain(opt.Follow); err != nil {
			return err
		}
		if !opt.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		// A file that became shorter than what was read, or was replaced
		// (the function deleted and made again), is read again from its start.
		st, err := os.Stat(path)
		if err != nil {
			continue // removed: it may come back
		}
		cur, err := file.Stat()
		if err != nil || !os.SameFile(st, cur) || st.Size() < t.offset {
			nf, err := os.Open(path)
			if err != nil {
				continue
			}
			file.Close()
			file = nf
			t.r.Reset(file)
			t.offset, t.pending = 0, nil
		}
	}
}

// lineReader turns bytes appended to a file into records.
type lineReader struct {
	r       *bufio.Reader
	since   time.Time
	emit    func(Record) error
	offset  int64     // bytes consumed
	pending []byte    // a line without its newline yet (following)
	skip    bool      // the rest of an over-long line is being skipped
	cut     bool      // the pending line was cut
	last    time.Time // of the last record with a time: raw lines take it
}

// drain emits every complete line there is; at the end of the file, a last
// line without a newline is emitted unless following (it may grow).
func (t *lineReader) drain(follow bool) error {
	for {
		chunk, err := t.r.ReadSlice('\n')
		t.offset += int64(len(chunk))
		complete := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if complete {
			chunk = chunk[:len(chunk)-1]
		}
		if !t.skip {
			room := MaxLine - len(t.pending)
			if len(chunk) > room {
				chunk, t.skip, t.cut = chunk[:room], true, true
			}
			t.pending = append(t.pending, chunk...)
		}
		if complete {
			if err := t.line(); err != nil {
				return err
			}
			continue
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue // a line longer than the buffer: read on
		case errors.Is(err, io.EOF):
			if !follow && (len(t.pending) > 0 || t.skip) {
				return t.line()
			}
			return nil
		default:
			return err
		}
	}
}

func (t *lineReader) line() error {
	rec := Parse(t.pending, t.cut)
	t.pending, t.skip, t.cut = t.pending[:0], false, false
	if rec.Time.IsZero() {
		rec.Time = t.last
	} else {
		t.last = rec.Time
	}
	if !t.since.IsZero() && !rec.Time.IsZero() && rec.Time.Before(t.since) {
		return nil
	}
	if rec.Time.IsZero() && !t.since.IsZero() {
		return nil // a raw line before any dated one: its age is unknown
	}
	return t.emit(rec)
}

// tailOffset is where the last n lines of f begin, looking back at most
// maxScanBack bytes; n < 0 is the whole file.
func tailOffset(f *os.File, n int) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	if n == 0 {
		return end, nil
	}
	if n < 0 {
		return max(0, end-maxScanBack), nil
	}
	buf := make([]byte, 64<<10)
	pos := end
	newlines := 0
	// A final line without its newline counts as a line.
	if end > 0 {
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, end-1); err != nil {
			return 0, err
		}
		if b[0] == '\n' {
			newlines = -1 // the file's last newline ends the last line, it does not start one
		}
	}
	for pos > 0 && end-pos < maxScanBack {
		size := int64(len(buf))
		if pos < size {
			size = pos
		}
		pos -= size
		chunk := buf[:size]
		if _, err := f.ReadAt(chunk, pos); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				continue
			}
			newlines++
			if newlines == n {
				return pos + int64(i) + 1, nil
			}
		}
	}
	return max(0, end-maxScanBack), nil
}
