package daemon

import "testing"

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9000": true, "127.1.2.3:9000": true, "[::1]:9000": true, "localhost:9000": true,
		":9000": false, "0.0.0.0:9000": false, "10.0.0.1:9000": false, "cp.example.com:9000": false, "bad": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
