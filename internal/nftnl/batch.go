// Package nftnl writes nf_tables transactions over netlink the way nft writes them, for the
// engines whose renderings are nft text (kube-proxy's nftables mode, the nftables policy
// engine): each engine translates the commands of its own renderings, this package the
// parts they share: the batch of messages and its sending as one transaction (Send), the
// tables, chains and sets as nft declares them, element lists, and rules (Rule: the rule
// forms the renderings write, as the expressions nft 1.0.6 generates for them).
//
// Why not nft: nft 1.0.6 spends most of a large load in userspace (parsing, evaluating,
// serializing; see internal/engine/proxy's applyNFTNetlink for the figures), and starts a
// process and reads the table's cache for every small change.
package nftnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Batch is a translated input: the operations to send, in order, on one table (family ip).
type Batch struct {
	Table *nftables.Table
	Line  int                     // the input line being translated (errors name it)
	Rules []*nftables.Rule        // the rules added, in order (tests look at them)
	Elems [][]nftables.SetElement // the elements added or deleted, by call, in order
	ops   []op
	anon  uint32              // anonymous maps queued
	seen  map[string]seenRule // with Repeated: the rules translated so far, by their text
	parts map[string]xpart    // with Repeated: IPTRule's rule parts, by their text

	// Repeated says that the input repeats rules word for word (the policy engine's: the same
	// rule in thousands of policy chains): each distinct rule is then translated and
	// marshalled once, kept in a map by its text. Where rules are all different (the proxy's)
	// the map costs more than it saves. By hand, test binaries of both ways alternated three
	// times (BenchmarkNFTNetlinkVsNft, BenchmarkNFTFullNetlinkVsNft, nl_translate_s): 20,000
	// policies 0.089-0.100 s with it against 0.174-0.177 s without; 10,000 Services 0.158-0.167
	// s with it against 0.104-0.112 s without.
	Repeated bool
	// IPSets are the kernel indices of the ipsets IPTRule's set matches name (IPSetIndices).
	IPSets map[string]uint16
	sets   uint32 // named sets declared (their IDs in the transaction)
	src    []int  // by message (Messages): its input line
}

// New is an empty batch on table NAME of family ip.
func New(table string) *Batch {
	return &Batch{Table: &nftables.Table{Name: table, Family: nftables.TableFamilyIPv4}}
}

// op is one queued operation: a call on a github.com/google/nftables connection, or a
// message of our own (for what its API cannot say, or says slowly).
type op struct {
	f    func(*nftables.Conn) error
	raw  netlink.Message // when f is nil
	line int             // of the input (1 the first)
}

// op queues a call on a github.com/google/nftables connection.
func (b *Batch) op(f func(*nftables.Conn) error) { b.ops = append(b.ops, op{f: f, line: b.Line}) }

// raw queues a message of the caller's.
func (b *Batch) raw(m netlink.Message) { b.ops = append(b.ops, op{raw: m, line: b.Line}) }

// Apply marshals the batch and sends it to the network namespace at nsPath as one
// transaction.
func (b *Batch) Apply(nsPath string) error {
	msgs, err := b.Messages()
	if err != nil {
		return fmt.Errorf("nftables netlink messages: %w", err)
	}
	return Send(nsPath, msgs, b.src)
}

// The user data attributes of tables and chains (linux/netfilter/nf_tables.h), which
// golang.org/x/sys/unix lacks.
const (
	nftaTableUserdata = 6
	nftaChainUserdata = 12
)

// Msg is the netlink message type of an nf_tables command.
func Msg(cmd int) netlink.HeaderType {
	return netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | cmd)
}

// msgData is a message body: the nfgenmsg header (family ip) and the attributes.
func msgData(attrs []netlink.Attribute) ([]byte, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return nil, err
	}
	return append([]byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}, b...), nil
}

// create queues a NEW* message (flags request and create) with attrs.
func (b *Batch) create(cmd int, attrs []netlink.Attribute) error {
	data, err := msgData(attrs)
	if err != nil {
		return err
	}
	b.raw(netlink.Message{Header: netlink.Header{Type: Msg(cmd), Flags: netlink.Request | netlink.Create}, Data: data})
	return nil
}

// AddTable queues `add table ip T`, with its comment if not "" (the table's user data, as
// nft writes it: github.com/google/nftables has no table comment).
func (b *Batch) AddTable(comment string) error {
	attrs := []netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: []byte(b.Table.Name + "\x00")},
		{Type: unix.NFTA_TABLE_FLAGS, Data: make([]byte, 4)},
	}
	if comment != "" {
		attrs = append(attrs, netlink.Attribute{Type: nftaTableUserdata, Data: userdata.AppendString(nil, userdata.TypeComment, comment)})
	}
	return b.create(unix.NFT_MSG_NEWTABLE, attrs)
}

// DelTable queues `delete table ip T`.
func (b *Batch) DelTable() { b.op(func(c *nftables.Conn) error { c.DelTable(b.Table); return nil }) }

// FlushChain queues `flush chain ip T NAME`.
func (b *Batch) FlushChain(name string) {
	ch := &nftables.Chain{Table: b.Table, Name: name}
	b.op(func(c *nftables.Conn) error { c.FlushChain(ch); return nil })
}

// DelChain queues `delete chain ip T NAME`.
func (b *Batch) DelChain(name string) {
	ch := &nftables.Chain{Table: b.Table, Name: name}
	b.op(func(c *nftables.Conn) error { c.DelChain(ch); return nil })
}

// hooks are the hooks of the base chains (family ip).
var hooks = map[string]uint32{"prerouting": unix.NF_INET_PRE_ROUTING, "input": unix.NF_INET_LOCAL_IN,
	"forward": unix.NF_INET_FORWARD, "output": unix.NF_INET_LOCAL_OUT, "postrouting": unix.NF_INET_POST_ROUTING}

// priorities are the named priorities nft knows for family ip's filter and nat chains.
var priorities = map[string]int64{"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}

// AddChain queues `add chain ip T NAME` with spec, the tokens between its braces: none (the
// message (*nftables.Conn).AddChain writes, without going through it: 20,000 of them cost
// 0.2 s there), a base chain's "type T hook H priority P ; [policy accept|drop ;]" (P a
// number or a name nft knows), or "comment "C" ;" (a chain's comment is its user data).
func (b *Batch) AddChain(name string, spec []string) error {
	attrs := []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: []byte(b.Table.Name + "\x00")},
		{Type: unix.NFTA_CHAIN_NAME, Data: []byte(name + "\x00")},
	}
	body := spec
	switch {
	case len(body) == 0:
	case (len(body) == 7 || len(body) == 10) && body[0] == "type" && body[2] == "hook" && body[4] == "priority" && body[6] == ";":
		hook, ok := hooks[body[3]]
		prio, err := strconv.ParseInt(body[5], 10, 32)
		if p, named := priorities[body[5]]; named {
			prio, err = p, nil
		}
		if !ok || err != nil || (body[1] != "filter" && body[1] != "nat") {
			return fmt.Errorf("base chain spec %q", strings.Join(body, " "))
		}
		h, err := netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.NFTA_HOOK_HOOKNUM, Data: binaryutil.BigEndian.PutUint32(hook)},
			{Type: unix.NFTA_HOOK_PRIORITY, Data: binaryutil.BigEndian.PutUint32(uint32(int32(prio)))},
		})
		if err != nil {
			return err
		}
		attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_CHAIN_HOOK, Data: h})
		if len(body) == 10 {
			pol := map[string]uint32{"accept": 1, "drop": 0} // NF_ACCEPT, NF_DROP
			v, ok := pol[body[8]]
			if body[7] != "policy" || !ok || body[9] != ";" {
				return fmt.Errorf("base chain spec %q", strings.Join(body, " "))
			}
			attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_CHAIN_POLICY, Data: binaryutil.BigEndian.PutUint32(v)})
		}
		attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_CHAIN_TYPE, Data: []byte(body[1] + "\x00")})
	case len(body) == 3 && body[0] == "comment" && body[2] == ";":
		c, err := strconv.Unquote(body[1])
		if err != nil {
			return err
		}
		attrs = append(attrs, netlink.Attribute{Type: nftaChainUserdata, Data: userdata.AppendString(nil, userdata.TypeComment, c)})
	default:
		return fmt.Errorf("chain spec %q", strings.Join(body, " "))
	}
	return b.create(unix.NFT_MSG_NEWCHAIN, attrs)
}

// ruleMsg is the message that appends r to table's chain, as (*nftables.Conn).AddRule writes
// it (table, chain, expressions, user data; flags create and append), marshalled into one
// buffer (appendExpr writes the expressions in place): AddRule's attribute lists cost 0.1 s of allocations for 10,000 Services' 40,000
// rules. body, if not nil, is what an earlier message of the same rule had after its table
// and chain (expressions and user data): it is copied instead of marshalled again. The
// message's own body is returned with it. compat, if not nil, is an NFTA_RULE_COMPAT
// attribute, put last (iptables-nft's). marshalled, if not nil, are r.Exprs marshalled
// already (IPTRule's, from its cache).
func ruleMsg(table, chain string, r *nftables.Rule, body, compat []byte, marshalled [][]byte) (netlink.Message, []byte, error) {
	size := len(body)
	if body == nil {
		size = 4 + attrLen(len(r.UserData)) + len(compat)
		for _, b := range marshalled {
			size += attrLen(len(b))
		}
		if marshalled == nil {
			size += 64 * len(r.Exprs) // a guess: most expressions take less
		}
	}
	head := 4 + attrLen(len(table)+1) + attrLen(len(chain)+1)
	buf := make([]byte, 0, head+size)
	buf = append(buf, unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0)
	buf = appendStrAttr(buf, unix.NFTA_RULE_TABLE, table)
	buf = appendStrAttr(buf, unix.NFTA_RULE_CHAIN, chain)
	if body != nil {
		buf = append(buf, body...)
	} else {
		buf = append(buf, 0, 0, 0, 0) // NFTA_RULE_EXPRESSIONS, its length once known
		if marshalled != nil {
			for _, b := range marshalled {
				buf = appendAttr(buf, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, b)
			}
		} else {
			for _, e := range r.Exprs {
				var err error
				if buf, err = appendExpr(buf, e); err != nil {
					return netlink.Message{}, nil, err
				}
			}
		}
		if len(buf)-head > 0xffff {
			return netlink.Message{}, nil, errors.New("a rule's expressions over 64 KB")
		}
		binary.NativeEndian.PutUint16(buf[head:], uint16(len(buf)-head))
		binary.NativeEndian.PutUint16(buf[head+2:], unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS)
		if r.UserData != nil {
			buf = appendAttr(buf, unix.NFTA_RULE_USERDATA, r.UserData)
		}
		buf = append(buf, compat...)
	}
	m := netlink.Message{Header: netlink.Header{Type: Msg(unix.NFT_MSG_NEWRULE), Flags: netlink.Request | netlink.Create | unix.NLM_F_APPEND}, Data: buf}
	return m, buf[head:], nil
}

func attrLen(n int) int { return align(4 + n) }

// appendAttr appends a netlink attribute (host-order header, data padded to 4 bytes).
func appendAttr(buf []byte, typ uint16, data []byte) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, uint16(4+len(data)))
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	buf = append(buf, data...)
	for range attrLen(len(data)) - 4 - len(data) {
		buf = append(buf, 0)
	}
	return buf
}

// anonMap is the name an anonymous map is created with; the kernel numbers it
// ("__map0", ...), and the batch's rules and elements name it by its ID.
const anonMap = "__map%d"

// numgenMap queues the anonymous verdict map of "numgen random mod N vmap { 0 : goto C0,
// ... }" (tok: from "{" to "}") and returns its ID in the batch. The map is written as nft
// writes it (TestNFTNetlinkFullObjectsAsNft compares every attribute): constant, keys of
// type integer in host byte order (github.com/google/nftables marks every anonymous set big
// endian, and has no way to say otherwise; nft then lists "1 : goto ..." as
// "16777216 : goto ..."), its size, and the data's records as nft 1.0.6 writes them.
func (b *Batch) numgenMap(mod uint32, tok []string) (uint32, error) {
	body, err := Braced(tok)
	if err != nil {
		return 0, err
	}
	var elems []nftables.SetElement
	for _, e := range SplitOn(body, ",") {
		if len(e) < 3 || e[1] != ":" {
			return 0, fmt.Errorf("numgen vmap element %q", strings.Join(e, " "))
		}
		k, err := strconv.ParseUint(e[0], 10, 32)
		if err != nil || k >= uint64(mod) {
			return 0, fmt.Errorf("numgen vmap key %q", e[0])
		}
		v, err := verdict(e[2:])
		if err != nil {
			return 0, err
		}
		elems = append(elems, nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(k)), VerdictData: v})
	}
	b.anon++
	id := uint32(1000 + b.anon) // after the named sets'
	desc, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_SET_DESC_SIZE, Data: binaryutil.BigEndian.PutUint32(uint32(len(elems)))}})
	if err != nil {
		return 0, err
	}
	ud := userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, 1)
	ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATABYTEORDER, 0)
	ud = userdata.Append(ud, userdata.NFTNL_UDATA_SET_DATA_TYPEOF, []byte{0, 4, 1, 0, 0, 0, 1, 0})
	ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATA_INTERVAL, 0)
	data, err := msgData([]netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: []byte(b.Table.Name + "\x00")},
		{Type: unix.NFTA_SET_NAME, Data: []byte(anonMap + "\x00")},
		{Type: unix.NFTA_SET_FLAGS, Data: binaryutil.BigEndian.PutUint32(unix.NFT_SET_ANONYMOUS | unix.NFT_SET_CONSTANT | unix.NFT_SET_MAP)},
		{Type: unix.NFTA_SET_KEY_TYPE, Data: binaryutil.BigEndian.PutUint32(nftables.TypeInteger.GetNFTMagic())},
		{Type: unix.NFTA_SET_KEY_LEN, Data: binaryutil.BigEndian.PutUint32(4)},
		{Type: unix.NFTA_SET_ID, Data: binaryutil.BigEndian.PutUint32(id)},
		{Type: unix.NFTA_SET_DATA_TYPE, Data: binaryutil.BigEndian.PutUint32(unix.NFT_DATA_VERDICT)},
		{Type: unix.NFTA_SET_DATA_LEN, Data: binaryutil.BigEndian.PutUint32(16)},
		{Type: unix.NLA_F_NESTED | unix.NFTA_SET_DESC, Data: desc},
		{Type: unix.NFTA_SET_USERDATA, Data: ud},
	})
	if err != nil {
		return 0, err
	}
	b.raw(netlink.Message{Header: netlink.Header{Type: Msg(unix.NFT_MSG_NEWSET), Flags: netlink.Request | netlink.Create}, Data: data})
	// Not Anonymous: github.com/google/nftables refuses to add elements to one (its own
	// AddSet sends them with the set); the elements' message names the set and its ID alike.
	set := &nftables.Set{Table: b.Table, Name: anonMap, ID: id, IsMap: true}
	b.Elems = append(b.Elems, elems)
	b.op(func(c *nftables.Conn) error { return c.SetAddElements(set, elems) })
	return id, nil
}

// Src is, after Messages, each message's input line (Batch.Line when it was queued).
func (b *Batch) Src() []int { return b.src }

// Messages marshals the batch's operations: github.com/google/nftables writes its messages
// into a connection that only records them (nltest), ours are taken as they are.
func (b *Batch) Messages() ([]netlink.Message, error) {
	out := make([]netlink.Message, 0, len(b.ops))
	rec := func(req []netlink.Message) ([]netlink.Message, error) {
		if req == nil { // Flush waiting for an ack
			return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 20)}}, nil
		}
		for _, m := range req {
			if t := m.Header.Type; t != unix.NFNL_MSG_BATCH_BEGIN && t != unix.NFNL_MSG_BATCH_END {
				out = append(out, m)
			}
		}
		return nil, nil
	}
	c, err := nftables.New(nftables.WithTestDial(rec))
	if err != nil {
		return nil, err
	}
	b.src = make([]int, 0, len(b.ops))
	for _, op := range b.ops {
		n := len(out)
		if op.f == nil {
			out = append(out, op.raw)
		} else if err := op.f(c); err != nil {
			return nil, err
		} else if err := c.Flush(); err != nil { // (a few per batch: rules are raw)
			return nil, err
		}
		for range len(out) - n {
			b.src = append(b.src, op.line)
		}
	}
	return out, nil
}

// Send sends msgs to nf_tables in the network namespace at nsPath as one transaction,
// the way nft does: BATCH_BEGIN, the messages, BATCH_END in ONE sendmsg (the kernel runs a
// batch from a single buffer: one that ends before BATCH_END is aborted, so a transaction
// cannot be spread over several sendmsg calls), with the socket's send buffer raised to the
// batch's size (SO_SNDBUFFORCE; nft 1.0.6 sends a 10,000-Service table as one 14 MB
// sendmsg). No message asks for an ack or an echo but the last: the kernel answers only
// errors and that ack, after the commit, so the replies stay small whatever the batch's size.
// A failed commit is acked with its error on the batch's first message.
//
// src, if not nil, names each message's source (its input line) in errors.
func Send(nsPath string, msgs []netlink.Message, src []int) error {
	if len(msgs) == 0 {
		return nil
	}
	f, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return fmt.Errorf("nftables netlink in %s: %w", nsPath, err)
	}
	defer conn.Close()
	_ = conn.SetOption(netlink.ExtendedAcknowledge, true)
	// (Not netlink.CapAcknowledge: github.com/mdlayher/netlink then fails to parse the
	// kernel's error, "not enough data for netlink error code". An error carries a copy of
	// its message, a few hundred bytes: there is one per failed message, at most.)
	// The batch marshalled into one buffer of its size (netlink.Conn.SendMessages grows one
	// by appending: 14 MB copied over and over for 10,000 Services).
	size := 2 * align(16+4)
	for _, m := range msgs {
		size += align(16 + len(m.Data))
	}
	buf := make([]byte, 0, size)
	seq := uint32(time.Now().UnixNano())
	put := func(typ netlink.HeaderType, flags netlink.HeaderFlags, data []byte) {
		seq++
		n := 16 + len(data)
		buf = binary.NativeEndian.AppendUint32(buf, uint32(n))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(typ))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(flags))
		buf = binary.NativeEndian.AppendUint32(buf, seq)
		buf = binary.NativeEndian.AppendUint32(buf, 0)
		buf = append(buf, data...)
		buf = append(buf, make([]byte, align(n)-n)...)
	}
	batchHdr := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}
	put(unix.NFNL_MSG_BATCH_BEGIN, netlink.Request, batchHdr)
	for i, m := range msgs {
		flags := m.Header.Flags &^ (netlink.Acknowledge | netlink.Echo)
		if i == len(msgs)-1 {
			flags |= netlink.Acknowledge
		}
		put(m.Header.Type, flags, m.Data)
	}
	last := seq
	put(unix.NFNL_MSG_BATCH_END, netlink.Request, batchHdr)
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, max(size+(64<<10), 256<<10))
		if serr == nil {
			// Room for an error on every message (each carries a copy of its message), as
			// nft makes room: else the first error is lost in ENOBUFS.
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, max(2*size, 256<<10))
		}
	}); err != nil || serr != nil {
		return fmt.Errorf("nftables netlink: send buffer of %d bytes: %v %v", size, err, serr)
	}
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil || serr != nil {
		return fmt.Errorf("nftables netlink transaction in %s: sendto of %d bytes: %v %v", nsPath, size, err, serr)
	}
	// The kernel has run the batch when sendmsg returns: the replies are already queued.
	// They are read raw, to tell which message an error is about (its sequence number).
	first := last - uint32(len(msgs)) + 1
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	rbuf := make([]byte, 1<<20)
	var fails []string
	var firstErr error
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), rbuf, 0)
			return !errors.Is(rerr, unix.EAGAIN)
		}); err != nil || rerr != nil {
			return fmt.Errorf("nftables netlink transaction in %s: receive: %v %v (errors so far: %s)", nsPath, err, rerr, strings.Join(fails, "; "))
		}
		for b := rbuf[:n]; len(b) >= 16; {
			l := int(binary.NativeEndian.Uint32(b))
			if l < 16 || l > len(b) {
				break
			}
			typ, seq := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:])
			if typ == unix.NLMSG_ERROR && l >= 20 {
				if errno := -int32(binary.NativeEndian.Uint32(b[16:])); errno != 0 {
					what := "the commit"
					if i := seq - first; i < uint32(len(msgs)) { // (unsigned: the numbers may wrap)
						what = fmt.Sprintf("message %d of %d (type %d)", i+1, len(msgs), msgs[i].Header.Type&0xff)
						if int(i) < len(src) {
							what += fmt.Sprintf(", of input line %d", src[i])
						}
					}
					fails = append(fails, fmt.Sprintf("%s: %v", what, syscall.Errno(errno)))
					if firstErr == nil {
						firstErr = syscall.Errno(errno)
					}
				}
				if seq == last {
					if firstErr != nil {
						return fmt.Errorf("nftables netlink transaction in %s refused: %w (%s)", nsPath, firstErr, strings.Join(fails, "; "))
					}
					return nil
				}
			}
			b = b[min(align(l), len(b)):]
		}
	}
}

// align rounds a netlink length up to 4 bytes.
func align(n int) int { return (n + 3) &^ 3 }
