package advisory

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
)

// Key names one advisory lock. PostgreSQL has two key forms that live in
// separate lock spaces: a single bigint (pg_advisory_xact_lock(bigint)) and a
// pair of integers (pg_advisory_xact_lock(int, int)). IntKey(1) and
// PairKey(0, 1) are different locks, even though both are "1" in some sense,
// so Key remembers its form. The zero Key is IntKey(0).
//
// A key made by NamespacedKey or KeyFromString also remembers the names it
// was made from, so that errors name what the caller named ("namespace
// \"billing\", name \"invoice-42\"") beside the bigint that pg_locks shows.
// Keys compare equal with == when they name the same lock in the same way;
// a key read back from the server (Locks, Holders) carries no names, so
// compare locks with SameLock.
//
// Keys are scoped to the current database: the same key in two databases of
// one server names two unrelated locks.
type Key struct {
	v    int64
	pair bool
	from keyOrigin
	ns   string // NamespacedKey's namespace
	name string // the name given to NamespacedKey or KeyFromString
}

// keyOrigin records how a bigint key was made.
type keyOrigin uint8

const (
	fromInt keyOrigin = iota
	fromString
	fromNamespace
)

// IntKey returns the single-bigint key k.
func IntKey(k int64) Key { return Key{v: k} }

// PairKey returns the two-integer key (classID, objID), as taken by
// pg_advisory_xact_lock(int, int). Use it to partition keys by hand: the
// first integer for a table or subsystem, the second for a row id.
func PairKey(classID, objID int32) Key {
	return Key{v: int64(classID)<<32 | int64(uint32(objID)), pair: true}
}

// KeyFromString derives a bigint key from a name: the first 8 bytes of
// SHA-256 of the UTF-8 name, read as a big-endian two's-complement int64.
// The function is stable (pinned by tests) and can be computed in SQL, so a
// psql session or a migration can take the same lock:
//
//	('x' || left(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 16))::bit(64)::bigint
//
// The bigint key space is shared by every application that uses advisory
// locks in the database. Two different names collide with probability about
// n²/2⁶⁵ for n names (about one in 3.7·10¹⁰ for a million names); a
// collision makes two unrelated jobs exclude each other, it never lets two
// holders in. Hand-picked small integers (1, 2, 42…) collide far more often
// across teams than hashed names; prefer NamespacedKey.
func KeyFromString(name string) Key {
	k := hashKey(name)
	k.from, k.name = fromString, name
	return k
}

func hashKey(s string) Key {
	sum := sha256.Sum256([]byte(s))
	return IntKey(int64(binary.BigEndian.Uint64(sum[:8])))
}

// NamespacedKey derives a bigint key from a namespace (your service or
// subsystem) and a name inside it. It hashes the byte length of the
// namespace in decimal, a colon, the namespace and the name, so that
// ("ab", "c") and ("a", "bc") differ:
//
//	KeyFromString(strconv.Itoa(len(namespace)) + ":" + namespace + name)
//
// The SQL equivalent is
//
//	('x' || left(encode(sha256(convert_to(octet_length(ns)::text || ':' || ns || name, 'UTF8')), 'hex'), 16))::bit(64)::bigint
//
// (octet_length counts bytes in the database encoding, which is the UTF-8
// length in a UTF-8 database).
func NamespacedKey(namespace, name string) Key {
	k := hashKey(strconv.Itoa(len(namespace)) + ":" + namespace + name)
	k.from, k.ns, k.name = fromNamespace, namespace, name
	return k
}

// Name returns the namespace and name a key was made from: both for
// NamespacedKey, an empty namespace for KeyFromString, and ok false for
// IntKey, PairKey and keys read back from the server.
func (k Key) Name() (namespace, name string, ok bool) {
	return k.ns, k.name, k.from != fromInt
}

// SameLock reports whether k and o name the same server lock, however
// each was made (a NamespacedKey and the IntKey that Locks decodes from
// pg_locks are the same lock).
func (k Key) SameLock(o Key) bool { return k.v == o.v && k.pair == o.pair }

// describe returns k for an error message: the value pg_locks shows and,
// for a named key, the names it was made from (capped; see capInput).
func (k Key) describe() string {
	switch k.from {
	case fromNamespace:
		return k.String() + " (namespace " + strconv.Quote(capInput(k.ns)) + ", name " + strconv.Quote(capInput(k.name)) + ")"
	case fromString:
		return k.String() + " (name " + strconv.Quote(capInput(k.name)) + ")"
	}
	return k.String()
}

// Int64 returns the bigint value of a single-bigint key and true, or 0 and
// false for a pair key.
func (k Key) Int64() (int64, bool) {
	if k.pair {
		return 0, false
	}
	return k.v, true
}

// Pair returns the two integers of a pair key and true, or zeros and false
// for a single-bigint key.
func (k Key) Pair() (classID, objID int32, ok bool) {
	if !k.pair {
		return 0, 0, false
	}
	return int32(k.v >> 32), int32(uint32(k.v)), true
}

// IsPair reports whether k is a two-integer key.
func (k Key) IsPair() bool { return k.pair }

// String returns the key as PostgreSQL arguments: "42" or "(1,2)".
func (k Key) String() string {
	if a, b, ok := k.Pair(); ok {
		return "(" + strconv.FormatInt(int64(a), 10) + "," + strconv.FormatInt(int64(b), 10) + ")"
	}
	return strconv.FormatInt(k.v, 10)
}

// lockIDs returns the values pg_locks shows for k: classid, objid and
// objsubid (1 for the bigint form, 2 for the pair form).
func (k Key) lockIDs() (classID, objID int64, objSubID int32) {
	u := uint64(k.v)
	classID, objID = int64(u>>32), int64(u&0xffffffff)
	if k.pair {
		return classID, objID, 2
	}
	return classID, objID, 1
}

// keyFromLockIDs decodes pg_locks.classid/objid/objsubid. It reports false
// for an objsubid that is neither 1 nor 2 (not an advisory key this package
// knows).
func keyFromLockIDs(classID, objID int64, objSubID int32) (Key, bool) {
	v := int64(uint64(uint32(classID))<<32 | uint64(uint32(objID)))
	switch objSubID {
	case 1:
		return Key{v: v}, true
	case 2:
		return Key{v: v, pair: true}, true
	}
	return Key{}, false
}

// args returns the bind arguments for the lock functions. Pair keys are
// int32 values and their placeholders carry an ::int4 cast (see
// placeholders), so the (int, int) overload is chosen even by a driver that
// declares every Go integer as int8.
func (k Key) args() []any {
	if a, b, ok := k.Pair(); ok {
		return []any{a, b}
	}
	return []any{k.v}
}

// placeholders returns the argument list of a lock function call for k,
// numbering parameters from first: "$3" or "$3::int4, $4::int4".
func (k Key) placeholders(first int) string {
	if k.pair {
		return "$" + strconv.Itoa(first) + "::int4, $" + strconv.Itoa(first+1) + "::int4"
	}
	return "$" + strconv.Itoa(first)
}
