// Package faultproxy is a TCP proxy for tests that injects network faults
// between a client and a server on the loopback: a partition that holds every
// byte in both directions until it heals (as TCP retransmission would deliver
// them after a real partition), a reset of every open connection, and a
// refusal of new ones.
//
// It only ever listens on and dials loopback addresses given by the test.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards connections from its listen address to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu          sync.Mutex
	partitioned bool
	healed      chan struct{} // closed when a partition heals; replaced when one starts
	refusing    bool
	conns       map[*pair]struct{}
	closed      bool
	wg          sync.WaitGroup
}

type pair struct{ client, server *net.TCPConn }

// Start listens on a free port of 127.0.0.1 and forwards to target, which
// must be a loopback address.
func Start(target string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if ip := net.ParseIP(host); (ip == nil && host != "localhost") || (ip != nil && !ip.IsLoopback()) {
		return nil, fmt.Errorf("faultproxy: target %q is not a loopback address", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{ln: ln, target: target, healed: healed, conns: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's listen port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refusing || p.closed
		p.mu.Unlock()
		if refuse {
			resetConn(c.(*net.TCPConn))
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			resetConn(c.(*net.TCPConn))
			continue
		}
		pr := &pair{client: c.(*net.TCPConn), server: s.(*net.TCPConn)}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(pr, pr.server, pr.client)
		go p.pipe(pr, pr.client, pr.server)
	}
}

// pipe copies src to dst, waiting out partitions between reads and before
// each write, so that nothing crosses while the network is cut.
func (p *Proxy) pipe(pr *pair, dst, src *net.TCPConn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitHealed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Half-close: pass the FIN on, after any partition.
				p.waitHealed()
				_ = dst.CloseWrite()
				return
			}
			p.drop(pr)
			return
		}
	}
}

func (p *Proxy) waitHealed() {
	p.mu.Lock()
	h := p.healed
	p.mu.Unlock()
	<-h
}

func (p *Proxy) drop(pr *pair) {
	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
	resetConn(pr.client)
	resetConn(pr.server)
}

// resetConn closes c with an RST rather than a FIN.
func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// Partition stops every byte in both directions, on open and new
// connections, until Heal. Connections stay open: neither side sees an error,
// as in a real partition before TCP gives up.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.partitioned {
		p.partitioned = true
		p.healed = make(chan struct{})
	}
}

// Heal ends a partition; held bytes flow on.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
}

// ResetAll closes every open connection with an RST on both sides.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	prs := make([]*pair, 0, len(p.conns))
	for pr := range p.conns {
		prs = append(prs, pr)
	}
	p.mu.Unlock()
	for _, pr := range prs {
		p.drop(pr)
	}
}

// Refuse makes the proxy reset new connections at once (on=true) or accept
// them again (on=false).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refusing = on
	p.mu.Unlock()
}

// Conns returns the number of open connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, heals any partition, resets every connection and
// waits for the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Heal()
	p.ResetAll()
	p.wg.Wait()
	return err
}
