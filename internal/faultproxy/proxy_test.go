package faultproxy

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, err := r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func TestPartitionHoldsBytesUntilHeal(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("before partition: %q, %v", got, err)
	}

	p.Partition()
	if got, err := roundTrip(t, c, r, "two", 200*time.Millisecond); err == nil {
		t.Fatalf("a reply crossed the partition: %q", got)
	}
	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil || line != "two\n" {
		t.Fatalf("after heal the held bytes did not arrive: %q, %v", line, err)
	}
}

func TestResetAllAndRefuse(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(t, c, r, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Conns() != 1 {
		t.Fatalf("Conns = %d, want 1", p.Conns())
	}
	p.ResetAll()
	if _, err := roundTrip(t, c, r, "y", 5*time.Second); err == nil {
		t.Fatal("a reset connection still works")
	}

	p.Refuse(true)
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		r2 := bufio.NewReader(c2)
		if _, err := roundTrip(t, c2, r2, "z", 2*time.Second); err == nil {
			t.Fatal("a refused connection works")
		}
		c2.Close()
	}
	p.Refuse(false)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(t, c3, bufio.NewReader(c3), "w", 5*time.Second); err != nil || got != "w" {
		t.Fatalf("after Refuse(false): %q, %v", got, err)
	}
}

func TestStartRejectsNonLoopback(t *testing.T) {
	for _, target := range []string{"10.0.0.1:5432", "example.com:5432", "nonsense"} {
		if p, err := Start(target); err == nil {
			p.Close()
			t.Errorf("Start(%q) succeeded; want an error", target)
		}
	}
}
