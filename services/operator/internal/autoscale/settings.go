package autoscale

import (
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Reason says why a version has the replica count it has; it goes into the
// Function's status next to the count.
type Reason string

const (
	ReasonLoad           Reason = "Load"                              // the stable window's load over the target
	ReasonPanic          Reason = "Panic"                             // the panic window's load; no scale-down while it lasts
	ReasonBacklog        Reason = "Backlog"                           // the queue backlog over its drain time raised the count
	ReasonColdStartGuard Reason = "ColdStartGuard"                    // buffered calls asked for more than 2x the ready replicas
	ReasonScaleDownDelay Reason = "ScaleDownDelay"                    // a higher count of the last scaleDownDelay is held
	ReasonIdleWait       Reason = "IdleWait"                          // no load, but not idle for scaleDownDelay yet
	ReasonDrainToZero    Reason = slessv1.ScalingReasonDrainingToZero // idle for scaleDownDelay: marked idle, waiting for the data plane to hold its calls
	ReasonWakeLimited    Reason = "WakeLimited"                       // calls wait, but the tenant's wake rate is used up this second
	ReasonZero           Reason = "ScaledToZero"                      // idle for scaleDownDelay with minReplicas 0 and no floor
	ReasonMinReplicas    Reason = "MinReplicas"                       // raised to minReplicas
	ReasonMaxReplicas    Reason = "MaxReplicas"                       // lowered to maxReplicas
	ReasonQuota          Reason = "QuotaPods"                         // lowered to what the tenant's pods quota allows
	ReasonPreWarm        Reason = "PreWarm"                           // a floor for a cron fire that is about to run
	ReasonSchedule       Reason = "Schedule"                          // a floor from a schedule
	ReasonIncoming       Reason = "Incoming"                          // a floor while a version that is to get traffic starts, before the flip
)

// DefaultConcurrency is the CRD's default for spec.concurrency, used when
// none is given.
const DefaultConcurrency = 10

// MinTarget is the smallest target concurrency: below it one call would
// ask for more than ten replicas, which no function needs.
const MinTarget = 0.1

// Defaults are what the platform gives the scaling settings a function
// leaves unset. The operator's config sets them (the chart's
// scaling.defaults); BuiltIn are the values without one. They are the one
// owner of these defaults: the CRD defaults none of the fields, and the
// data plane reads maxBufferedRequests with this default applied from the
// Function's status (Function.MaxBufferedRequests).
type Defaults struct {
	MinReplicas int32
	MaxReplicas int32
	// TargetPercent is the share of a replica's concurrency the scaler
	// plans to use, in percent (Knative's
	// container-concurrency-target-percentage).
	TargetPercent int32
	// ScaleDownDelay is how long demand must stay lower before the count
	// goes down, and how long a version must be idle to go to zero.
	ScaleDownDelay time.Duration
	// MaxBufferedRequests bounds the calls a gateway or invoker replica
	// holds per version while it wakes; beyond it, 503 with Retry-After.
	MaxBufferedRequests int32
}

// BuiltIn are the defaults when the operator is given none: one replica,
// a target of 70 % (a replica at its limit queues, and 30 % headroom
// absorbs the load that arrives while a new replica starts), 120 s and
// 1000 buffered calls.
var BuiltIn = Defaults{MinReplicas: 1, MaxReplicas: 1, TargetPercent: 70, ScaleDownDelay: 120 * time.Second,
	MaxBufferedRequests: slessv1.DefaultMaxBufferedRequests}

// Spec is the raw scaling configuration of a version, as plain numbers from
// Function.spec.scaling and the version's concurrency; zero (nil for
// MinReplicas, where 0 allows scale to zero) means "not set".
type Spec struct {
	MinReplicas           *int32
	MaxReplicas           int32
	Concurrency           int32   // calls in flight per replica
	TargetConcurrency     float64 // 0: TargetPercent of Concurrency
	ScaleDownDelaySeconds int32
	MaxBufferedRequests   int32
}

// Settings are the scaling settings with every default applied; build them
// with [Defaults.Apply].
type Settings struct {
	MinReplicas         int32
	MaxReplicas         int32
	MaxReason           Reason // why MaxReplicas is what it is: ReasonMaxReplicas or ReasonQuota
	TargetConcurrency   float64
	ScaleDownDelay      time.Duration
	MaxBufferedRequests int32
	// Floor is a lower bound on top of MinReplicas for a while (a pre-warm
	// or a schedule), FloorReason says which; 0 means none.
	Floor       int32
	FloorReason Reason
}

// Apply applies the defaults d to a raw spec: a target of d.TargetPercent
// of the version's concurrency (never above the concurrency itself, which
// would plan more calls per replica than a replica admits, and never below
// MinTarget), and a maxReplicas of at least max(minReplicas, 1). A field of
// d that is not positive (BuiltIn's MinReplicas excepted, 0 is a minimum)
// falls back to BuiltIn's.
func (d Defaults) Apply(sp Spec) Settings {
	conc := float64(sp.Concurrency)
	if sp.Concurrency < 1 {
		conc = DefaultConcurrency
	}
	target := sp.TargetConcurrency
	if target <= 0 {
		pct := d.TargetPercent
		if pct <= 0 {
			pct = BuiltIn.TargetPercent
		}
		target = conc * float64(pct) / 100 // exact for whole concurrencies and percents
	}
	target = max(min(target, conc), MinTarget)
	s := Settings{
		MinReplicas:         max(d.MinReplicas, 0),
		MaxReplicas:         sp.MaxReplicas,
		MaxReason:           ReasonMaxReplicas,
		TargetConcurrency:   target,
		ScaleDownDelay:      time.Duration(sp.ScaleDownDelaySeconds) * time.Second,
		MaxBufferedRequests: sp.MaxBufferedRequests,
	}
	if sp.MinReplicas != nil {
		s.MinReplicas = max(*sp.MinReplicas, 0)
	}
	if s.MaxReplicas <= 0 {
		s.MaxReplicas = d.MaxReplicas
	}
	s.MaxReplicas = max(s.MaxReplicas, s.MinReplicas, 1)
	if s.ScaleDownDelay <= 0 {
		s.ScaleDownDelay = d.ScaleDownDelay
	}
	if s.ScaleDownDelay <= 0 {
		s.ScaleDownDelay = BuiltIn.ScaleDownDelay
	}
	if s.MaxBufferedRequests <= 0 {
		s.MaxBufferedRequests = d.MaxBufferedRequests
	}
	if s.MaxBufferedRequests <= 0 {
		s.MaxBufferedRequests = BuiltIn.MaxBufferedRequests
	}
	return s
}

// WithFloor returns s with a floor of n for reason, unless s already has a
// floor at least as high: several floors (a pre-warm, schedules) at once
// keep the highest.
func (s Settings) WithFloor(n int32, reason Reason) Settings {
	if n > s.Floor {
		s.Floor, s.FloorReason = n, reason
	}
	return s
}

// ClampToQuota lowers s.MaxReplicas to podsAllowed, the pods the tenant's
// quota leaves for this version, and records ReasonQuota as why; a max
// within the quota is kept as it is.
func ClampToQuota(s Settings, podsAllowed int32) Settings {
	if podsAllowed < s.MaxReplicas {
		s.MaxReplicas, s.MaxReason = max(podsAllowed, 0), ReasonQuota
	}
	return s
}
