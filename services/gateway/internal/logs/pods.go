package logs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Container is the name of the function's container in its pods (the
// operator's resources.FunctionContainerName).
const Container = "function"

// MaxPods bounds the replicas one request reads at once.
const MaxPods = 20

// Pods reads the logs of a function's pods through the Kubernetes API
// (pods/log), as kubectl logs does: tenants never need kubectl.
type Pods struct {
	Client kubernetes.Interface
	// Now is the clock for sinceSeconds; time.Now when nil.
	Now func() time.Time
}

// PodLogOptions is the pods/log request for opt: the function's container,
// with timestamps (a raw line gets its time from them), follow, and since
// and tail as the API takes them.
func PodLogOptions(opt Options, now time.Time) *corev1.PodLogOptions {
	o := &corev1.PodLogOptions{Container: Container, Follow: opt.Follow, Timestamps: true}
	if !opt.Since.IsZero() {
		sec := int64(math.Ceil(now.Sub(opt.Since).Seconds()))
		o.SinceSeconds = &sec
		if sec < 1 {
			o.SinceSeconds = ptr(int64(1))
		}
	}
	if opt.Tail >= 0 {
		o.TailLines = ptr(int64(opt.Tail))
	}
	if !opt.Follow {
		o.LimitBytes = ptr(int64(maxScanBack)) // as much as a local tail reads back at most
	}
	return o
}

// Stream implements Source: the function's pods (label
// sless.kube5s.ru/function) are read together, their records interleaved
// as they arrive. Without follow, the pods that exist are read one after
// the other, oldest first. With follow, a watch of the pods adds each new
// one (a rollout, a scale-up) from its first line once it runs.
func (p Pods) Stream(ctx context.Context, namespace, function string, opt Options, emit func(Record) error) error {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	pods := p.Client.CoreV1().Pods(namespace)
	sel := labels.SelectorFromSet(labels.Set{slessv1.LabelFunction: function}).String()
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: MaxPods})
	if err != nil {
		return fmt.Errorf("list the pods of %s/%s: %w", namespace, function, err)
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].CreationTimestamp.Before(&items[j].CreationTimestamp) })

	var mu sync.Mutex // emit is called by one reader at a time
	var emitErr error
	locked := func(r Record) error {
		mu.Lock()
		defer mu.Unlock()
		if emitErr == nil {
			emitErr = emit(r)
		}
		return emitErr
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	read := func(pod *corev1.Pod, o *corev1.PodLogOptions) {
		name, version := pod.Name, podVersion(pod)
		rc, err := pods.GetLogs(name, o).Stream(ctx)
		if err != nil {
			if ctx.Err() == nil {
				_ = locked(Record{Time: now().UTC(), Stream: StreamRuntime, Level: "warn", Pod: name, FunctionVersion: version,
					Message: "the logs of this replica cannot be read now"})
			}
			return
		}
		defer rc.Close()
		if err := readPodLog(rc, name, version, locked); err != nil {
			cancel() // the client is gone
		}
	}
	first := PodLogOptions(opt, now())
	if !opt.Follow {
		for i := range items {
			if readable(&items[i]) {
				read(&items[i], first)
			}
		}
		return emitErr
	}

	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	started := map[string]bool{}
	start := func(pod *corev1.Pod, o *corev1.PodLogOptions) {
		if started[pod.Name] || !readable(pod) || len(started) >= 4*MaxPods {
			return
		}
		started[pod.Name] = true
		wg.Add(1)
		go func() { defer wg.Done(); read(pod, o) }()
	}
	for i := range items {
		start(&items[i], first)
	}
	// A pod that starts later is read from its first line.
	later := PodLogOptions(Options{Follow: true, Tail: -1}, now())
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		_ = locked(Record{Time: now().UTC(), Stream: StreamRuntime, Level: "warn", Message: "new replicas will not be followed: the pods cannot be watched"})
		<-ctx.Done()
		return nil
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				<-ctx.Done() // the watch ended; the readers go on
				return nil
			}
			if pod, isPod := ev.Object.(*corev1.Pod); isPod && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				start(pod, later)
			}
		}
	}
}

// readable says whether the kubelet has a log of the pod's container.
func readable(pod *corev1.Pod) bool {
	switch pod.Status.Phase {
	case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
		return true
	}
	return false
}

// podVersion is the version a pod runs, from its label
// (slessv1.LabelVersion); 0 when it has none (a function from before
// versions).
func podVersion(pod *corev1.Pod) int32 {
	n, err := strconv.ParseInt(pod.Labels[slessv1.LabelVersion], 10, 32)
	if err != nil || n < 1 {
		return 0
	}
	return int32(n)
}

// readPodLog turns a pods/log body with timestamps into records of the
// pod, which runs version (0: unknown).
func readPodLog(r io.Reader, pod string, version int32, emit func(Record) error) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var line []byte
	skip, cut := false, false
	for {
		chunk, err := br.ReadSlice('\n')
		complete := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if complete {
			chunk = chunk[:len(chunk)-1]
		}
		if !skip {
			room := MaxLine + 40 - len(line) // the timestamp's room too
			if len(chunk) > room {
				chunk, skip, cut = chunk[:room], true, true
			}
			line = append(line, chunk...)
		}
		if complete || (errors.Is(err, io.EOF) && len(line) > 0) {
			if e := emit(podRecord(line, cut, pod, version)); e != nil {
				return e
			}
			line, skip, cut = line[:0], false, false
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return nil // the stream ended (the pod went away, or the request ended)
		}
	}
}

// podRecord parses "<RFC 3339 time> <line>", as pods/log writes with
// timestamps. A line without a version (a raw one) takes the pod's.
func podRecord(line []byte, cut bool, pod string, version int32) Record {
	var ts time.Time
	if sp := bytes.IndexByte(line, ' '); sp > 0 && sp < 40 {
		if t, err := time.Parse(time.RFC3339Nano, string(line[:sp])); err == nil {
			ts, line = t.UTC(), line[sp+1:]
		}
	}
	rec := Parse(line, cut)
	if rec.Time.IsZero() {
		rec.Time = ts
	}
	rec.Pod = pod
	if rec.FunctionVersion == 0 {
		rec.FunctionVersion = version
	}
	return rec
}

func ptr[T any](v T) *T { return &v }
