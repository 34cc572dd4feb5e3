// Command web is the test workload of the cluster acceptance test, assembled
// into an image with go-containerregistry and pushed to the local registry:
//
//	web serve ADDR   answer every request with "hello from HOSTNAME"
//	web get URL      print the body of one GET (3 s timeout); exit 1 on failure
//	web until ok|fail URL
//	                 GET every 0.5 s, for up to 30 s, until one succeeds (ok)
//	                 or fails (fail); print the last result as get does and
//	                 the number of tries; exit 1 if the last GET failed
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "until" && (os.Args[2] == "ok" || os.Args[2] == "fail") {
		want := os.Args[2] == "ok"
		deadline := time.Now().Add(30 * time.Second)
		for i := 1; ; i++ {
			out, err := get(os.Args[3])
			if (err == nil) == want || time.Now().After(deadline) {
				if err != nil {
					fmt.Println("error:", err)
				} else {
					fmt.Print(out)
				}
				fmt.Printf("(after %d tries)\n", i)
				if err != nil {
					os.Exit(1)
				}
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: web serve ADDR | web get URL")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		host, _ := os.Hostname()
		srv := &http.Server{
			Addr:              os.Args[2],
			ReadHeaderTimeout: 5 * time.Second,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintf(w, "hello from %s\n", host)
			}),
		}
		fmt.Fprintln(os.Stderr, srv.ListenAndServe())
		os.Exit(1)
	case "get":
		out, err := get(os.Args[2])
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Print(out)
	default:
		fmt.Fprintln(os.Stderr, "usage: web serve ADDR | web get URL")
		os.Exit(2)
	}
}

// get returns the body of one GET of url (3 s timeout) answered 200.
func get(url string) (string, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s", resp.Status)
	}
	return string(b), nil
}
