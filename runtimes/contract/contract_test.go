package contract

import "testing"

// TestFixturesParse: every fixture names a request and a status, and the
// echo fixture's expected body is there.
func TestFixturesParse(t *testing.T) {
	fs, err := Fixtures()
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) < 10 {
		t.Fatalf("%d fixtures", len(fs))
	}
	for _, f := range fs {
		if f.Name == "" || f.Request.Method == "" || f.Request.Path == "" || f.Response.Status == 0 {
			t.Errorf("incomplete fixture %+v", f)
		}
	}
	if len(fs[1].Response.JSON) == 0 {
		t.Errorf("the echo fixture has no expected JSON body: %+v", fs[1])
	}
}
