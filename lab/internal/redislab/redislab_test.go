package redislab_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/lab/internal/redislab"
)

func needBinary(t *testing.T) {
	t.Helper()
	if _, err := redislab.FindBinary(); err != nil {
		if os.Getenv("PGADVISORY_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("redis-server required: %v", err)
		}
		t.Skip(err)
	}
}

func pingAddr(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func TestStartStop(t *testing.T) {
	needBinary(t)
	lab, err := redislab.Start(context.Background(), 3, redislab.WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	addrs := lab.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs() = %v, want 3 addresses", addrs)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("address %s handed out twice: %v", a, addrs)
		}
		seen[a] = true
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("address %s is not on the loopback", a)
		}
		if got, err := pingAddr(a); err != nil || got != "+PONG" {
			t.Errorf("PING %s = %q, %v; want +PONG", a, got, err)
		}
	}
	pids := lab.PIDs()
	if len(pids) != 3 {
		t.Fatalf("PIDs() = %v, want 3", pids)
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, a := range addrs {
		if _, err := pingAddr(a); err == nil {
			t.Errorf("%s still answers after Close", a)
		}
	}
	for _, pid := range pids {
		// Signal 0 probes for existence; the children were reaped by Close.
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("redis-server pid %d still running after Close", pid)
		}
	}
}

func TestMissingBinary(t *testing.T) {
	_, err := redislab.Start(context.Background(), 1, redislab.WithBinary("/nonexistent/redis-server"))
	var mb *redislab.MissingBinaryError
	if !errors.As(err, &mb) {
		t.Fatalf("err = %v, want *MissingBinaryError", err)
	}
	if !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Errorf("error %q does not name the package", err)
	}
}

func TestBadArguments(t *testing.T) {
	for _, n := range []int{0, -1, redislab.MaxInstances + 1} {
		if _, err := redislab.Start(context.Background(), n); err == nil || !strings.HasPrefix(err.Error(), "redislab: ") {
			t.Errorf("Start(%d) err = %v, want a redislab error", n, err)
		}
	}
	if _, err := redislab.Start(context.Background(), 1, nil); err == nil {
		t.Error("Start with a nil option succeeded")
	}
	if _, err := redislab.Start(context.Background(), 1, redislab.WithBinary("")); err == nil {
		t.Error("WithBinary(\"\") accepted")
	}
}

func TestStartCanceled(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lab, err := redislab.Start(ctx, 1)
	if err == nil {
		lab.Close()
		t.Fatal("Start with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled in the chain", err)
	}
}
