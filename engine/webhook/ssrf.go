package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// Policy decides where webhooks may connect. Webhook URLs are written by
// users, so without it a URL could reach the services beside crmd: the
// database, an admin port, a cloud metadata service. The check happens
// when the connection is made (Control), on the address actually dialled,
// so a host name that resolves to an internal address, at once or after
// the URL was checked (DNS rebinding), is refused too. The zero Policy is
// the default: every address Blocked names is refused.
type Policy struct {
	// Allow lists prefixes that may be reached even though Blocked refuses
	// them: loopback for tests, or the network of an on-premises receiver.
	Allow []netip.Prefix
}

// RefusedError is why a connection to an address was refused.
type RefusedError struct {
	Addr   netip.Addr
	Reason string // as Blocked gives it: "loopback address"
}

func (e *RefusedError) Error() string { return "refused: " + e.Reason + " " + e.Addr.String() }

// ParseAllow reads the value of an allow-list flag: comma-separated CIDR
// prefixes (10.0.0.0/8) or single addresses (10.1.2.3, ::1). Empty items
// are skipped, so "" allows nothing.
func ParseAllow(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := parseAllowItem(item)
		if err != nil {
			return nil, fmt.Errorf("allow list entry %q: %w", item, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseAllowItem(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8")
		}
		p = p.Masked()
		// Addresses are compared unmapped, so a prefix of IPv4-mapped
		// addresses is kept as the IPv4 prefix it stands for.
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, errors.New("is not an IP address or CIDR prefix")
	}
	if a.Zone() != "" {
		return netip.Prefix{}, errors.New("has an IPv6 zone; give the address without it")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// blockedRange is a range of addresses that webhooks never go to, and why.
type blockedRange struct {
	prefix netip.Prefix
	reason string
}

// blockedRanges are checked in order, so a narrower range with a more
// telling reason comes before the range that holds it. IPv4-mapped and
// NAT64 addresses are judged by the IPv4 address they carry, before this.
var blockedRanges = []blockedRange{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "link-local address (cloud metadata service)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},

	{netip.MustParsePrefix("::/128"), "unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback address"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible address (deprecated)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "discard-only address"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignment address (Teredo, benchmarking, ORCHID)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 address"},
	{netip.MustParsePrefix("3fff::/20"), "documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (private) address"},
	{netip.MustParsePrefix("fe80::/10"), "link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "site-local address (deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast address"},
}

var (
	// nat64 is the well-known NAT64 prefix: on an IPv6-only network the
	// IPv4 internet is reached through it, so it is judged by the IPv4
	// address in its last 32 bits, not refused whole.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// globalUnicast is the only IPv6 space assigned for global unicast;
	// the rest is reserved.
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// Blocked tells whether the default policy refuses to send webhooks to a,
// and why, in words for a person ("loopback address"). It refuses every
// address that is not plainly on the public internet: loopback, private,
// link-local (with the cloud metadata address), carrier-grade NAT,
// multicast, unspecified, broadcast, documentation, benchmarking and
// reserved ranges. An IPv4-mapped IPv6 address is judged as the IPv4
// address it maps, so ::ffff:127.0.0.1 is as refused as 127.0.0.1; an IPv6
// zone is ignored.
func Blocked(a netip.Addr) (reason string, blocked bool) {
	if !a.IsValid() {
		return "invalid address", true
	}
	a = a.WithZone("")
	if a.Is4In6() {
		if reason, blocked := Blocked(a.Unmap()); blocked {
			return "IPv4-mapped " + reason, true
		}
		return "", false
	}
	if nat64.Contains(a) {
		b := a.As16()
		if reason, blocked := Blocked(netip.AddrFrom4([4]byte(b[12:]))); blocked {
			return "NAT64 " + reason, true
		}
		return "", false
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(a) {
			return r.reason, true
		}
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return "reserved IPv6 address", true
	}
	return "", false
}

// CheckAddr returns a *RefusedError when a is blocked and the policy does
// not allow it, and nil when webhooks may connect to it.
func (p *Policy) CheckAddr(a netip.Addr) error {
	reason, blocked := Blocked(a)
	if !blocked || p.allows(a) {
		return nil
	}
	return &RefusedError{Addr: a, Reason: reason}
}

func (p *Policy) allows(a netip.Addr) bool {
	if p == nil {
		return false
	}
	a = a.WithZone("")
	for _, prefix := range p.Allow {
		if prefix.Contains(a) || prefix.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// CheckURL checks a webhook URL before it is used: http or https, with a
// host and without a user name or password (credentials go in headers,
// where they are not logged with the URL). A host that is an IP address
// is checked against the policy now; a host name is checked when it is
// dialled, on every address it resolves to. Errors never hold the URL,
// whose query may hold a token.
func (p *Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("the webhook URL does not parse: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			return errors.New("the webhook URL has no scheme; it must be http or https")
		}
		return fmt.Errorf("the webhook URL's scheme is %q; only http and https are allowed", u.Scheme)
	case u.Hostname() == "":
		return errors.New("the webhook URL has no host")
	case u.User != nil:
		return errors.New("the webhook URL holds a user name or password; send credentials in headers instead")
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		return p.CheckAddr(a)
	}
	return nil
}

// Control is for net.Dialer.Control: it runs once the address to connect
// to is resolved, before connecting, and refuses an address the policy
// does not allow. Its error is a *RefusedError, which names the address
// and the reason.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refused: %q is not an IP address and port", address)
	}
	return p.CheckAddr(ap.Addr())
}
