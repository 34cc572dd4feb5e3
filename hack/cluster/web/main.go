// Command web is the test workload of the cluster acceptance test, assembled
// into an image with go-containerregistry and pushed to the local registry:
//
//	web serve ADDR   answer every request with "hello from HOSTNAME"
//	web get URL      print the body of one GET (3 s timeout); exit 1 on failure
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
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
		c := &http.Client{Timeout: 3 * time.Second}
		resp, err := c.Get(os.Args[2])
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			fmt.Println("error:", resp.Status, err)
			os.Exit(1)
		}
		fmt.Print(string(b))
	default:
		fmt.Fprintln(os.Stderr, "usage: web serve ADDR | web get URL")
		os.Exit(2)
	}
}
