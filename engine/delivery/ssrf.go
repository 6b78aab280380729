package delivery

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// Policy says where webhooks may connect. By default nothing private:
// loopback, private networks, link-local (and so cloud metadata), CGNAT,
// multicast and other special addresses are refused; Allow lets given
// prefixes through (tests, receivers on the operator's own network).
type Policy struct {
	Allow []netip.Prefix
}

// ParseAllow reads comma-separated CIDRs or addresses.
func ParseAllow(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or CIDR", s)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or CIDR", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

var blocked = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local address (cloud metadata lives here)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},
	{netip.MustParsePrefix("::/128"), "unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "discard address"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "private address"},
	{netip.MustParsePrefix("fe80::/10"), "link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "multicast address"},
}

// Blocked reports whether the default policy refuses a, and why. An
// IPv4-mapped IPv6 address is judged as the IPv4 address it maps.
func Blocked(a netip.Addr) (string, bool) {
	a = a.Unmap()
	if !a.IsValid() {
		return "invalid address", true
	}
	for _, b := range blocked {
		if b.prefix.Contains(a) {
			return b.reason, true
		}
	}
	return "", false
}

func (p *Policy) allowed(a netip.Addr) error {
	a = a.Unmap()
	reason, bad := Blocked(a)
	if !bad {
		return nil
	}
	for _, pre := range p.Allow {
		if pre.Contains(a) {
			return nil
		}
	}
	return fmt.Errorf("refused: %s %s", reason, a)
}

// CheckURL checks a URL before any connection: http or https, a host, no
// user name; a literal address is checked now, a name when it is dialled.
func (p *Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("refused: only http and https URLs, not %q", u.Scheme)
	case u.Hostname() == "":
		return fmt.Errorf("refused: the URL has no host")
	case u.User != nil:
		return fmt.Errorf("refused: the URL holds a user name")
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		return p.allowed(a)
	}
	return nil
}

// Control is a net.Dialer's Control: it runs on the address a connection is
// about to be made to, after name resolution, so a name that resolves (or
// rebinds) to a refused address is refused.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("refused: %q is not an address", host)
	}
	return p.allowed(a)
}
