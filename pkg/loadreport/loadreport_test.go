package loadreport

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/msg"
)

var hello = Key{Namespace: "sless-fn-acme", Function: "hello", Version: 3}

// TestSnapshotAveragesOverTheInterval: the average is time-weighted, the
// peak and completions are the interval's, a call still running counts in
// the next interval, and a version without work is left out.
func TestSnapshotAveragesOverTheInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr Tracker
		start := time.Now()
		a, b := tr.Begin(hello), tr.Begin(hello)
		time.Sleep(500 * time.Millisecond)
		a.End()
		a.End() // a second End counts nothing
		time.Sleep(500 * time.Millisecond)
		want := []msg.VersionLoad{{Namespace: hello.Namespace, Function: hello.Function, Version: 3, InFlight: 1.5, PeakInFlight: 2, Completions: 1}}
		if diff := cmp.Diff(want, tr.Snapshot(start.Add(time.Second))); diff != "" {
			t.Errorf("first second (-want +got):\n%s", diff)
		}
		time.Sleep(time.Second)
		want = []msg.VersionLoad{{Namespace: hello.Namespace, Function: hello.Function, Version: 3, InFlight: 1, PeakInFlight: 1}}
		if diff := cmp.Diff(want, tr.Snapshot(start.Add(2*time.Second))); diff != "" {
			t.Errorf("second second, one call still running (-want +got):\n%s", diff)
		}
		b.End()
		time.Sleep(time.Second)
		want = []msg.VersionLoad{{Namespace: hello.Namespace, Function: hello.Function, Version: 3, PeakInFlight: 1, Completions: 1}}
		if diff := cmp.Diff(want, tr.Snapshot(start.Add(3*time.Second))); diff != "" {
			t.Errorf("third second, the call ended at its start (-want +got):\n%s", diff)
		}
		time.Sleep(time.Second)
		if got := tr.Snapshot(start.Add(4 * time.Second)); len(got) != 0 {
			t.Errorf("an idle version is reported: %+v", got)
		}
		// Forgotten, and counted again from the next call.
		call := tr.Begin(hello)
		time.Sleep(time.Second)
		call.End()
		if got := tr.Snapshot(start.Add(5 * time.Second)); len(got) != 1 || got[0].Completions != 1 || got[0].InFlight != 1 {
			t.Errorf("after forgetting, a new call: %+v", got)
		}
	})
}

// TestNoCallIsLostToASnapshot: calls that begin while snapshots forget
// idle versions are all counted.
func TestNoCallIsLostToASnapshot(t *testing.T) {
	var tr Tracker
	const workers, calls = 8, 2000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				call := tr.Begin(hello)
				call.End()
			}
		})
	}
	done := make(chan struct{})
	total := 0
	go func() {
		defer close(done)
		for {
			for _, l := range tr.Snapshot(time.Now()) {
				total += l.Completions
			}
			if total == workers*calls {
				return
			}
		}
	}()
	wg.Wait()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("snapshots counted %d completions of %d", total, workers*calls)
	}
}

type recorder struct {
	mu   sync.Mutex
	sent []*msg.LoadReported
}

func (r *recorder) Signal(_ context.Context, m msg.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, m.(*msg.LoadReported))
	return nil
}

// TestReporterSendsEachSecondWithWork: one report a second while there is
// work, none while there is none.
func TestReporterSendsEachSecondWithWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr Tracker
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		r := &Reporter{Tracker: &tr, Signals: rec, Name: "gw-1"}
		go func() { _ = r.Run(ctx) }()
		call := tr.Begin(hello)
		time.Sleep(3500 * time.Millisecond)
		call.End()
		time.Sleep(5 * time.Second)
		cancel()
		synctest.Wait()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		// Seconds 1-3 in flight, second 4 the completion; then nothing.
		if len(rec.sent) != 4 {
			t.Fatalf("sent %d reports, want 4: %+v", len(rec.sent), rec.sent)
		}
		for _, m := range rec.sent {
			if m.Reporter != "gw-1" || len(m.Versions) != 1 || m.Versions[0].Function != "hello" {
				t.Errorf("report %+v", m)
			}
		}
		if last := rec.sent[3].Versions[0]; last.Completions != 1 || last.InFlight != 0.5 {
			t.Errorf("the last report: %+v", last)
		}
	})
}

func TestABufferedCallWakesAtOnceAndHeartbeatsFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr Tracker
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		r := &Reporter{Tracker: &tr, Signals: rec, Name: "gw-1"}
		go func() { _ = r.Run(ctx) }()
		time.Sleep(100 * time.Millisecond)
		endA := tr.Buffer(hello)
		endB := tr.Buffer(hello) // the second waiting call sends nothing more
		synctest.Wait()
		rec.mu.Lock()
		if len(rec.sent) != 1 || !rec.sent[0].Wake || len(rec.sent[0].Versions) != 1 || rec.sent[0].Versions[0].Buffered < 1 {
			t.Fatalf("after the first buffered call, sent %+v; want one wake report", rec.sent)
		}
		rec.mu.Unlock()
		time.Sleep(time.Second) // the regular report repeats the buffered calls
		endA()
		endB()
		rec.mu.Lock()
		if n := len(rec.sent); n != 2 || rec.sent[1].Wake || rec.sent[1].Versions[0].Buffered != 2 {
			t.Fatalf("the second report: %+v", rec.sent)
		}
		rec.mu.Unlock()

		tr.SetIdle("sless-fn-acme", "report", []int32{4})
		time.Sleep(time.Second)
		rec.mu.Lock()
		want := []msg.VersionRef{{Namespace: "sless-fn-acme", Function: "report", Version: 4}}
		if got := rec.sent[len(rec.sent)-1]; cmp.Diff(want, got.Idle) != "" {
			t.Errorf("a report while a version is marked idle lists it: %+v", got)
		}
		rec.mu.Unlock()
		tr.SetIdle("sless-fn-acme", "report", nil)
		time.Sleep(2 * time.Second) // the buffered calls ended: one report with their end, then quiet
		rec.mu.Lock()
		before := len(rec.sent)
		rec.mu.Unlock()
		time.Sleep(Heartbeat)
		cancel()
		synctest.Wait()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if got := rec.sent[before:]; len(got) != 1 || len(got[0].Versions) != 0 || len(got[0].Idle) != 0 {
			t.Errorf("over a quiet heartbeat interval, sent %+v; want one empty report", got)
		}
	})
}

// TestANewIdleMarkIsAcknowledgedAtOnceAndAgain: a version newly marked
// idle is acknowledged at once and again AckGap later, not at the next
// interval; the acknowledgement lists what of an idle version runs or
// began since the last report, and resets nothing: the next regular
// report still has the interval's calls. A mark seen again is not
// acknowledged again.
func TestANewIdleMarkIsAcknowledgedAtOnceAndAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr Tracker
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		r := &Reporter{Tracker: &tr, Signals: rec, Name: "gw-1"}
		go func() { _ = r.Run(ctx) }()
		sent := func() []*msg.LoadReported {
			synctest.Wait()
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return append([]*msg.LoadReported(nil), rec.sent...)
		}
		ref := func(v int32) msg.VersionRef {
			return msg.VersionRef{Namespace: hello.Namespace, Function: hello.Function, Version: v}
		}
		time.Sleep(100 * time.Millisecond) // between the intervals

		tr.SetIdle(hello.Namespace, hello.Function, []int32{4})
		got := sent()
		if len(got) != 1 || !got[0].Ack || cmp.Diff([]msg.VersionRef{ref(4)}, got[0].Idle) != "" || len(got[0].Versions) != 0 {
			t.Fatalf("at the mark, sent %+v; want one acknowledgement of version 4 with no work", got)
		}
		time.Sleep(AckGap)
		if got = sent(); len(got) != 2 || !got[1].Ack || cmp.Diff([]msg.VersionRef{ref(4)}, got[1].Idle) != "" {
			t.Fatalf("AckGap after the mark, sent %+v; want a second acknowledgement", got)
		}
		tr.SetIdle(hello.Namespace, hello.Function, []int32{4})
		if got = sent(); len(got) != 2 {
			t.Fatalf("the same mark seen again sent %+v; want nothing more", got[2:])
		}

		// A call that began on version 4 before this replica saw the mark
		// of version 5: the acknowledgement shows it.
		k4 := Key{Namespace: hello.Namespace, Function: hello.Function, Version: 4}
		call := tr.Begin(k4)
		tr.SetIdle(hello.Namespace, hello.Function, []int32{4, 5})
		got = sent()
		if len(got) != 3 || !got[2].Ack || len(got[2].Versions) != 1 || got[2].Versions[0].Version != 4 ||
			got[2].Versions[0].InFlight != 1 || got[2].Versions[0].PeakInFlight != 1 {
			t.Fatalf("a new mark with a call in flight on version 4: sent %+v; want an acknowledgement showing that call", got[2:])
		}
		call.End()
		time.Sleep(AckGap) // the second acknowledgement: the call ended, it still counts as begun
		if got = sent(); len(got) != 4 || len(got[3].Versions) != 1 || got[3].Versions[0].PeakInFlight != 1 {
			t.Fatalf("the second acknowledgement after the call ended: %+v; want the call's peak", got[3:])
		}
		time.Sleep(time.Second) // the regular report: the interval's call, whole
		got = sent()
		last := got[len(got)-1]
		if last.Ack || len(last.Versions) != 1 || last.Versions[0].Completions != 1 || last.Versions[0].PeakInFlight != 1 {
			t.Fatalf("the regular report after the acknowledgements: %+v; want the call's completion and peak", last)
		}
	})
}
