package msg

import "time"

// TypeLoadReported names a data-plane replica's report of the load it saw
// on each function version over about the last second.
const TypeLoadReported = "scaling.load.v1"

// SignalExchange is the fanout exchange of the platform's signals: reports
// that matter for seconds only. They are published without persistence or
// confirms, and every operator replica reads them from a queue of its own
// that lives as long as its connection; a lost report is replaced by the
// next one a second later.
const SignalExchange = "sless.signals"

// LoadReported is one reporter's (a gateway or invoker replica's) load per
// function version over the last interval. Only versions with work in the
// interval, or with work that ended in it, are listed. A reporter with
// nothing to list still reports every few seconds (loadreport.Heartbeat),
// so that the scaler knows which reporters live.
type LoadReported struct {
	// Reporter names the replica that sent it (its host name and process):
	// the scaler keeps each reporter's latest report per second and adds
	// the reporters up.
	Reporter string        `json:"reporter"`
	SentAt   time.Time     `json:"sent_at"`
	Versions []VersionLoad `json:"versions"`
	// Idle lists the versions this reporter sees marked idle while they
	// still have replicas (status.serving[].idle, on their way to zero):
	// from now on it buffers their calls instead of sending them. The
	// scaler takes a version to zero only once every live reporter said
	// so, with nothing of that version in flight (the drain handshake).
	Idle []VersionRef `json:"idle,omitempty"`
	// Wake is set on a report sent at once, outside the interval, because
	// calls began to wait for a version at zero.
	Wake bool `json:"wake,omitempty"`
	// Ack is set on a report sent at once, outside the interval, because
	// this reporter saw a new idle mark, and once more loadreport.AckGap
	// later: Idle as usual, and Versions only for the idle versions, with
	// what of them is in flight, waiting, or began since the last full
	// report. Its counts are not an interval's: the scaler takes it for
	// the handshake only.
	Ack bool `json:"ack,omitempty"`
}

// VersionRef names one version of one function.
type VersionRef struct {
	Namespace string `json:"namespace"`
	Function  string `json:"function"`
	Version   int32  `json:"version"`
}

// VersionLoad is the load on one version of one function.
type VersionLoad struct {
	Namespace string `json:"namespace"`
	Function  string `json:"function"`
	Version   int32  `json:"version"`
	// InFlight is the average number of calls in flight over the
	// interval, PeakInFlight the most at once.
	InFlight     float64 `json:"in_flight"`
	PeakInFlight int     `json:"peak_in_flight"`
	// Buffered is the number of calls waiting for a replica at the report.
	Buffered int `json:"buffered,omitempty"`
	// Completions is the number of calls that ended in the interval.
	Completions int `json:"completions"`
}

// Type implements Message.
func (*LoadReported) Type() string { return TypeLoadReported }
