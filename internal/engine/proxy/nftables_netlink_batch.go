package proxy

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
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The user data attributes of tables and chains (linux/netfilter/nf_tables.h), which
// golang.org/x/sys/unix lacks.
const (
	nftaTableUserdata = 6
	nftaChainUserdata = 12
)

// nftMsg is the netlink message type of an nf_tables command.
func nftMsg(cmd int) netlink.HeaderType {
	return netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | cmd)
}

// nftMsgData is a message body: the nfgenmsg header (family ip) and the attributes.
func nftMsgData(attrs []netlink.Attribute) ([]byte, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return nil, err
	}
	return append([]byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}, b...), nil
}

// addTable translates `add table ip kube-proxy [{ comment "C" ; }]`: the comment is the
// table's user data, as nft writes it (github.com/google/nftables has no table comment).
func (b *nlBatch) addTable(rest []string) error {
	attrs := []netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: []byte(NFTable + "\x00")},
		{Type: unix.NFTA_TABLE_FLAGS, Data: make([]byte, 4)},
	}
	if len(rest) > 0 {
		body, err := braced(rest)
		if err != nil {
			return err
		}
		if len(body) != 3 || body[0] != "comment" || body[2] != ";" {
			return fmt.Errorf("table spec %q", strings.Join(body, " "))
		}
		c, err := strconv.Unquote(body[1])
		if err != nil {
			return err
		}
		attrs = append(attrs, netlink.Attribute{Type: nftaTableUserdata, Data: userdata.AppendString(nil, userdata.TypeComment, c)})
	}
	data, err := nftMsgData(attrs)
	if err != nil {
		return err
	}
	b.raw(netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_NEWTABLE), Flags: netlink.Request | netlink.Create}, Data: data})
	return nil
}

// nftHooks are the hooks of the base chains (family ip).
var nftHooks = map[string]uint32{"prerouting": unix.NF_INET_PRE_ROUTING, "input": unix.NF_INET_LOCAL_IN,
	"forward": unix.NF_INET_FORWARD, "output": unix.NF_INET_LOCAL_OUT, "postrouting": unix.NF_INET_POST_ROUTING}

// addChainSpec translates `add chain ip kube-proxy NAME` (rest empty: the message
// (*nftables.Conn).AddChain writes, without going through it: 20,000 of them cost 0.2 s
// there), `add chain ip kube-proxy NAME { type T hook H priority P ; }` and
// `add chain ip kube-proxy NAME { comment "C" ; }` (a chain's comment is its user data).
func (b *nlBatch) addChainSpec(name string, rest []string) error {
	attrs := []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: []byte(NFTable + "\x00")},
		{Type: unix.NFTA_CHAIN_NAME, Data: []byte(name + "\x00")},
	}
	var body []string
	if len(rest) > 0 {
		var err error
		if body, err = braced(rest); err != nil {
			return err
		}
	}
	switch {
	case len(rest) == 0:
	case len(body) == 7 && body[0] == "type" && body[2] == "hook" && body[4] == "priority" && body[6] == ";":
		hook, ok := nftHooks[body[3]]
		prio, err := strconv.ParseInt(body[5], 10, 32)
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
		attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_CHAIN_HOOK, Data: h},
			netlink.Attribute{Type: unix.NFTA_CHAIN_TYPE, Data: []byte(body[1] + "\x00")})
	case len(body) == 3 && body[0] == "comment" && body[2] == ";":
		c, err := strconv.Unquote(body[1])
		if err != nil {
			return err
		}
		attrs = append(attrs, netlink.Attribute{Type: nftaChainUserdata, Data: userdata.AppendString(nil, userdata.TypeComment, c)})
	default:
		return fmt.Errorf("chain spec %q", strings.Join(body, " "))
	}
	data, err := nftMsgData(attrs)
	if err != nil {
		return err
	}
	b.raw(netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_NEWCHAIN), Flags: netlink.Request | netlink.Create}, Data: data})
	return nil
}

// nftKeyTypes are the key types of the sets and maps, as nftables.SetDatatype.
var nftKeyTypes = map[string]nftables.SetDatatype{"ipv4_addr": nftables.TypeIPAddr, "inet_proto": nftables.TypeInetProto, "inet_service": nftables.TypeInetService}

// addSetDecl translates the declaration of one of the table's sets or maps without elements
// (what a full rendering writes: `add set|map ip kube-proxy NAME { <nftSetDecls body> }`).
func (b *nlBatch) addSetDecl(name string, rest []string) error {
	set, err := nlSet(b.t, name)
	if err != nil {
		return err
	}
	body, err := braced(rest)
	if err != nil {
		return err
	}
	if decl := strings.Join(body, " "); decl != strings.Join(mustTokens(nftSetDecls[set.el].body), " ") {
		return fmt.Errorf("declaration %q is not the set's", decl)
	}
	var types []nftables.SetDatatype
	for _, f := range set.fields {
		types = append(types, nftKeyTypes[f])
	}
	key := types[0]
	if len(types) > 1 {
		if key, err = nftables.ConcatSetType(types...); err != nil {
			return err
		}
	}
	d := nftSetDecls[set.el].body
	comment, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(d[strings.Index(d, `comment "`)+len("comment "):]), " ;"))
	if err != nil {
		return err
	}
	// The user data is nft's (libnftnl's NFTNL_UDATA_SET_*): the key's byte order (big
	// endian for an address, none for a concatenation), and for a verdict map the data's
	// byte order, a record of the data's type (verdict) and that it is no interval; then
	// the comment. github.com/google/nftables writes other flags and data for these (a
	// concatenation flag and field lengths, no data type record); TestNFTNetlinkFullObjectsAsNft
	// compares every attribute with nft's.
	var ud []byte
	flags := uint32(0)
	if len(types) == 1 {
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, 2)
	} else {
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, 0)
	}
	attrs := []netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: []byte(NFTable + "\x00")},
		{Type: unix.NFTA_SET_NAME, Data: []byte(name + "\x00")},
		{Type: unix.NFTA_SET_KEY_TYPE, Data: binaryutil.BigEndian.PutUint32(key.GetNFTMagic())},
		{Type: unix.NFTA_SET_KEY_LEN, Data: binaryutil.BigEndian.PutUint32(key.Bytes)},
		{Type: unix.NFTA_SET_ID, Data: binaryutil.BigEndian.PutUint32(uint32(set.el + 1))},
	}
	if set.s.IsMap {
		flags |= unix.NFT_SET_MAP
		attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_SET_DATA_TYPE, Data: binaryutil.BigEndian.PutUint32(unix.NFT_DATA_VERDICT)},
			netlink.Attribute{Type: unix.NFTA_SET_DATA_LEN, Data: binaryutil.BigEndian.PutUint32(16)})
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATABYTEORDER, 0)
		ud = userdata.Append(ud, userdata.NFTNL_UDATA_SET_KEY_TYPEOF, []byte{0, 4, 13, 0, 0, 0, 1, 0})
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATA_INTERVAL, 0)
	}
	ud = userdata.AppendString(ud, userdata.NFTNL_UDATA_SET_COMMENT, comment)
	attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_SET_FLAGS, Data: binaryutil.BigEndian.PutUint32(flags)},
		netlink.Attribute{Type: unix.NFTA_SET_USERDATA, Data: ud})
	data, err := nftMsgData(attrs)
	if err != nil {
		return err
	}
	b.raw(netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_NEWSET), Flags: netlink.Request | netlink.Create}, Data: data})
	return nil
}

// nlRuleMsg is the message that appends r to its chain, as (*nftables.Conn).AddRule writes
// it (table, chain, expressions, user data; flags create and append), marshalled into one
// buffer: AddRule's attribute lists cost 0.1 s of allocations for 10,000 Services' 40,000
// rules.
func nlRuleMsg(r *nftables.Rule) (netlink.Message, error) {
	exprs := make([][]byte, len(r.Exprs))
	size := 4 + nlAttrLen(len(NFTable)+1) + nlAttrLen(len(r.Chain.Name)+1) + 4 + nlAttrLen(len(r.UserData))
	for i, e := range r.Exprs {
		b, err := expr.Marshal(byte(nftables.TableFamilyIPv4), e)
		if err != nil {
			return netlink.Message{}, err
		}
		exprs[i] = b
		size += nlAttrLen(len(b))
	}
	buf := make([]byte, 0, size)
	buf = append(buf, unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0)
	buf = nlAppendAttr(buf, unix.NFTA_RULE_TABLE, []byte(NFTable+"\x00"))
	buf = nlAppendAttr(buf, unix.NFTA_RULE_CHAIN, []byte(r.Chain.Name+"\x00"))
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0) // NFTA_RULE_EXPRESSIONS, its length once known
	for _, b := range exprs {
		buf = nlAppendAttr(buf, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, b)
	}
	binary.NativeEndian.PutUint16(buf[start:], uint16(len(buf)-start))
	binary.NativeEndian.PutUint16(buf[start+2:], unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS)
	if len(buf)-start > 0xffff {
		return netlink.Message{}, errors.New("a rule's expressions over 64 KB")
	}
	if r.UserData != nil {
		buf = nlAppendAttr(buf, unix.NFTA_RULE_USERDATA, r.UserData)
	}
	return netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_NEWRULE), Flags: netlink.Request | netlink.Create | unix.NLM_F_APPEND}, Data: buf}, nil
}

func nlAttrLen(n int) int { return nlmsgAlign(4 + n) }

// nlAppendAttr appends a netlink attribute (host-order header, data padded to 4 bytes).
func nlAppendAttr(buf []byte, typ uint16, data []byte) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, uint16(4+len(data)))
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	buf = append(buf, data...)
	for range nlAttrLen(len(data)) - 4 - len(data) {
		buf = append(buf, 0)
	}
	return buf
}

// nlAnonMap is the name an anonymous map is created with; the kernel numbers it
// ("__map0", ...), and the batch's rules and elements name it by its ID.
const nlAnonMap = "__map%d"

// numgenMap queues the anonymous verdict map of "numgen random mod N vmap { 0 : goto C0,
// ... }" (tok: from "{" to "}") and returns its ID in the batch. The map is written as nft
// writes it (TestNFTNetlinkFullObjectsAsNft compares every attribute): constant, keys of
// type integer in host byte order (github.com/google/nftables marks every anonymous set big
// endian, and has no way to say otherwise; nft then lists "1 : goto ..." as
// "16777216 : goto ..."), its size, and the data's records as nft 1.0.6 writes them.
func (b *nlBatch) numgenMap(mod uint32, tok []string) (uint32, error) {
	body, err := braced(tok)
	if err != nil {
		return 0, err
	}
	var elems []nftables.SetElement
	for _, e := range splitOn(body, ",") {
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
	id := uint32(1000 + b.anon) // after the named sets' (el + 1)
	desc, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_SET_DESC_SIZE, Data: binaryutil.BigEndian.PutUint32(uint32(len(elems)))}})
	if err != nil {
		return 0, err
	}
	ud := userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, 1)
	ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATABYTEORDER, 0)
	ud = userdata.Append(ud, userdata.NFTNL_UDATA_SET_DATA_TYPEOF, []byte{0, 4, 1, 0, 0, 0, 1, 0})
	ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATA_INTERVAL, 0)
	data, err := nftMsgData([]netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: []byte(NFTable + "\x00")},
		{Type: unix.NFTA_SET_NAME, Data: []byte(nlAnonMap + "\x00")},
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
	b.raw(netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_NEWSET), Flags: netlink.Request | netlink.Create}, Data: data})
	// Not Anonymous: github.com/google/nftables refuses to add elements to one (its own
	// AddSet sends them with the set); the elements' message names the set and its ID alike.
	set := &nftables.Set{Table: b.t, Name: nlAnonMap, ID: id, IsMap: true}
	b.elems = append(b.elems, elems)
	b.op(func(c *nftables.Conn) error { return c.SetAddElements(set, elems) })
	return id, nil
}

// messages marshals the batch's operations: github.com/google/nftables writes its messages
// into a connection that only records them (nltest), ours are taken as they are.
func (b *nlBatch) messages() ([]netlink.Message, error) {
	var out []netlink.Message
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
	b.src = b.src[:0]
	for _, op := range b.ops {
		n := len(out)
		if op.raw != nil {
			out = append(out, *op.raw)
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

// nlSendBatch sends msgs to nf_tables in the network namespace at nsPath as one transaction,
// the way nft does: BATCH_BEGIN, the messages, BATCH_END in ONE sendmsg (the kernel runs a
// batch from a single buffer: one that ends before BATCH_END is aborted, so a transaction
// cannot be spread over several sendmsg calls), with the socket's send buffer raised to the
// batch's size (SO_SNDBUFFORCE; nft 1.0.6 sends a 10,000-Service table as one 14 MB
// sendmsg). No message asks for an ack or an echo but the last: the kernel answers only
// errors and that ack, after the commit, so the replies stay small whatever the batch's size.
// A failed commit is acked with its error on the batch's first message.
//
// src, if not nil, names each message's source (its input line) in errors.
func nlSendBatch(nsPath string, msgs []netlink.Message, src []int) error {
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
	size := 2 * nlmsgAlign(16+4)
	for _, m := range msgs {
		size += nlmsgAlign(16 + len(m.Data))
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
		buf = append(buf, make([]byte, nlmsgAlign(n)-n)...)
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
			b = b[min(nlmsgAlign(l), len(b)):]
		}
	}
}

func nlmsgAlign(n int) int { return (n + 3) &^ 3 }
