package msg

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// everyField is a record with every field set, by reflection, so that a
// field added to InvocationCompleted and not to its encoder fails
// TestMarshalIsEncodingJSON.
func everyField(t *testing.T) InvocationCompleted {
	t.Helper()
	var m InvocationCompleted
	v := reflect.ValueOf(&m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case string, TriggerKind, InvocationStatus:
			f.SetString("v<&>\"" + v.Type().Field(i).Name)
		case int, int32, int64:
			f.SetInt(int64(1000 + i))
		case bool:
			f.SetBool(true)
		case time.Time:
			f.Set(reflect.ValueOf(t0.Add(time.Duration(i) * time.Millisecond)))
		case []byte:
			f.SetBytes([]byte("ok\x00\xff"))
		case *JobRef:
			f.Set(reflect.ValueOf(&JobRef{Name: "nightly", RunID: 4}))
		default:
			t.Fatalf("InvocationCompleted.%s: a type the test does not fill", v.Type().Field(i).Name)
		}
	}
	return m
}

// TestMarshalIsEncodingJSON: Marshal writes every message, and every
// shape of record and batch, byte for byte as json.Marshal does, and
// refuses what it refuses.
func TestMarshalIsEncodingJSON(t *testing.T) {
	full := everyField(t)
	odd := InvocationCompleted{InvocationID: "\u2028\u2029\xff\xfe\t\n\r\b\f\x01\x7f</script>", Tenant: "é😀", Error: `"quoted" \ back`,
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 5*3600+30*60)), FinishedAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		EnqueuedAt: time.Unix(0, 1).UTC(), Result: []byte{}, HTTPStatus: -1, QueueWaitMs: -5}
	msgs := append(samples(), &full, &odd, &InvocationCompleted{}, &InvocationBatch{}, &InvocationBatch{Records: []InvocationCompleted{}},
		&InvocationBatch{Records: []InvocationCompleted{full, odd, {}, full}})
	for _, m := range msgs {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Marshal(m)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: Marshal\n%s (%v), json.Marshal\n%s", m.Type(), got, err, want)
		}
	}
	far := full
	far.FinishedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range []Message{&far, &InvocationBatch{Records: []InvocationCompleted{full, far}}} {
		_, want := json.Marshal(m)
		if _, err := Marshal(m); err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("%s with a time past RFC 3339: error %v, want %v", m.Type(), err, want)
		}
	}
}

// FuzzAppendString: a string is written as json.Marshal writes it.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "<a href='x'>&amp;</a>", "\x00\x1f\x7f\x80", "\xed\xa0\x80", "\u2027\u2028\u2029\u202a",
		"tab\there\r\n", `back\slash "quote"`, "\xf0\x9f\x98", "😀é€"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
	})
}
