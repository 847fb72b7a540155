package lockscan

import (
	"errors"
	"fmt"
	"strings"
)

// Settings are the session settings that decide how the server reads the
// bytes of a statement. The zero value is the server's default: every field
// left empty means what a fresh PostgreSQL session has, never something
// weaker. Fields hold the values exactly as the server reports them in
// ParameterStatus, so a caller passes them through without interpreting
// them; a value the scanner does not know makes ScanWith fail closed.
type Settings struct {
	// StandardConformingStrings is standard_conforming_strings: "on" or
	// "off" (also any spelling of a boolean PostgreSQL accepts: true,
	// false, yes, no, 1, 0). "" means "on", the default since PostgreSQL
	// 9.1. With "off", a backslash in an ordinary '...' string is an
	// escape, as in E'...'.
	StandardConformingStrings string
	// ClientEncoding is client_encoding, for example "UTF8", "LATIN1",
	// "SJIS" (any case and punctuation, and PostgreSQL's aliases such as
	// "unicode" or "win1252"). "" means "UTF8". The server converts the
	// bytes of a statement from this encoding before reading them; in the
	// client-only encodings (SJIS, BIG5, GBK, UHC, GB18030, JOHAB,
	// SHIFT_JIS_2004) the second byte of a character can be a backslash or
	// a quote, so the scanner cannot read such text as the server does.
	ClientEncoding string
}

// DefaultSettings returns the server's defaults spelled out:
// standard_conforming_strings on, client_encoding UTF8. It reads the same
// as Settings{}.
func DefaultSettings() Settings {
	return Settings{StandardConformingStrings: "on", ClientEncoding: "UTF8"}
}

// ErrUnsupportedSettings is wrapped by the *UnsupportedSettingsError that
// ScanWith returns when the settings make the server read bytes in a way the
// scanner does not model, and the statement may mention an advisory-lock
// function or a dynamic-SQL construct. Like ErrTooComplex it is not a syntax
// error: the server may well run the statement, so a caller that enforces a
// policy must treat it as unscannable (fail closed):
//
//	if errors.Is(err, lockscan.ErrUnsupportedSettings) { /* refuse */ }
var ErrUnsupportedSettings = errors.New("lockscan: session settings the scanner cannot read statements under")

// UnsupportedSettingsError says which setting ScanWith could not model. It
// wraps ErrUnsupportedSettings.
type UnsupportedSettingsError struct {
	// Setting is "standard_conforming_strings" or "client_encoding".
	Setting string
	// Value is the value as given.
	Value string
	// Reason explains why the value cannot be modelled.
	Reason string
}

// Error says which setting and why.
func (e *UnsupportedSettingsError) Error() string {
	return fmt.Sprintf("lockscan: cannot read the statement as the server will under %s=%q: %s", e.Setting, e.Value, e.Reason)
}

// Unwrap returns ErrUnsupportedSettings.
func (e *UnsupportedSettingsError) Unwrap() error { return ErrUnsupportedSettings }

// reading is how the scanner reads text: the modelled part of Settings.
type reading struct {
	scsOff bool // standard_conforming_strings = off
}

// reading returns the reading s asks for, or an *UnsupportedSettingsError.
func (s Settings) reading() (reading, error) {
	// The values the server reports, first: no allocation.
	switch s.StandardConformingStrings {
	case "", "on":
		switch s.ClientEncoding {
		case "", "UTF8":
			return reading{}, nil
		}
	case "off":
		switch s.ClientEncoding {
		case "", "UTF8":
			return reading{scsOff: true}, nil
		}
	}
	var rd reading
	switch v := strings.ToLower(strings.TrimSpace(s.StandardConformingStrings)); v {
	case "", "on", "true", "yes", "1":
	case "off", "false", "no", "0":
		rd.scsOff = true
	default:
		return rd, &UnsupportedSettingsError{Setting: "standard_conforming_strings", Value: s.StandardConformingStrings, Reason: "not a boolean the scanner knows"}
	}
	if s.ClientEncoding != "" {
		name := cleanEncodingName(s.ClientEncoding)
		safe, known := clientEncodings[name]
		switch {
		case !known:
			return rd, &UnsupportedSettingsError{Setting: "client_encoding", Value: s.ClientEncoding, Reason: "unknown encoding"}
		case !safe:
			return rd, &UnsupportedSettingsError{Setting: "client_encoding", Value: s.ClientEncoding,
				Reason: "a client-only encoding whose multibyte characters can contain the bytes of a backslash or a quote"}
		}
	}
	return rd, nil
}

// cleanEncodingName normalises an encoding name the way PostgreSQL's
// clean_encoding_name does: ASCII letters lower-cased, everything but
// letters and digits dropped.
func cleanEncodingName(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z':
			b = append(b, c+'a'-'A')
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b = append(b, c)
		}
	}
	return string(b)
}

// clientEncodings maps the cleaned names and aliases of PostgreSQL's
// encodings (src/common/encnames.c, PostgreSQL 15–17) to whether the
// scanner reads text in them as the server does.
//
// true: encodings that are also valid server encodings. In each of them
// every byte below 0x80 is the ASCII character and every byte of a
// multibyte character is 0x80 or above, so the server, which converts the
// text to the database encoding before lexing it, sees the same quotes,
// backslashes, dollars, letters and digits at the same places as a lexer
// reading the raw bytes. The lexer's decisions depend only on those ASCII
// bytes (all non-ASCII bytes are identifier characters), so the tokens are
// the same; the names the scanner looks for are ASCII.
//
// false: the client-only encodings, whose second bytes can be 0x40–0x7E
// (SJIS 0x5C is a backslash): "表'" is a character and a quote to the
// server but a different split to a byte lexer.
var clientEncodings = map[string]bool{
	"sqlascii": true,
	"utf8":     true, "unicode": true,
	"eucjp": true, "euccn": true, "euckr": true, "euctw": true, "eucjis2004": true,
	"muleinternal": true,
	"latin1":       true, "latin2": true, "latin3": true, "latin4": true, "latin5": true,
	"latin6": true, "latin7": true, "latin8": true, "latin9": true, "latin10": true,
	"iso88591": true, "iso88592": true, "iso88593": true, "iso88594": true, "iso88599": true,
	"iso885910": true, "iso885913": true, "iso885914": true, "iso885915": true, "iso885916": true,
	"iso88595": true, "iso88596": true, "iso88597": true, "iso88598": true,
	"win1250": true, "win1251": true, "win1252": true, "win1253": true, "win1254": true,
	"win1255": true, "win1256": true, "win1257": true, "win1258": true,
	"windows1250": true, "windows1251": true, "windows1252": true, "windows1253": true, "windows1254": true,
	"windows1255": true, "windows1256": true, "windows1257": true, "windows1258": true,
	"win866": true, "win874": true, "windows866": true, "windows874": true,
	"alt": true, "cp866": true, "koi8": true, "koi8r": true, "koi8u": true,
	"tcvn": true, "tcvn5712": true, "vscii": true, "abc": true,
	"win": true, "mskanji": false,

	"sjis": false, "shiftjis": false, "windows932": false,
	"shiftjis2004": false,
	"big5":         false, "windows950": false,
	"gbk": false, "windows936": false, "cp936": false,
	"uhc": false, "windows949": false, "cp949": false,
	"gb18030": false,
	"johab":   false,
}

// ChangesReadingSettings reports whether query changes, in its own text, a
// setting that decides how the server reads later text
// (standard_conforming_strings, client_encoding, backslash_quote; see
// SettingChange.Reading), read from PostgreSQL's parse tree with the
// server's default settings: Scan(query) and Result.ChangesReading. The
// server parses a whole simple-protocol Query before running any of it,
// but bodies, EXECUTE strings and later extended-protocol messages are read
// after the change, under the new value; the ParameterStatus that reports
// it arrives only afterwards. Words in strings, comments and identifiers
// do not count. A query the scanner cannot read is reported as changing
// them (fail closed).
func ChangesReadingSettings(query string) bool {
	r, err := defaultScanner.Scan(query)
	return err != nil || r.ChangesReading()
}

// MayChangeSettings is the pre-filter for Result.Settings: when it returns
// false, the query changes none of the settings SettingChange reports, so
// Scan finds no Settings without parsing. It is a lexical check that errs
// towards true and never allocates: a change names its setting
// ("conforming", "encoding", "backslash", "timeout"), or is SET NAMES,
// RESET ALL, DISCARD ALL, set_config (whose first argument may be an
// expression) or an UPDATE of pg_settings, each as a word the parser needs ASCII case-insensitively
// anywhere in the bytes; a string or identifier may also spell them with
// escapes (U&, backslash escapes, string continuation), as MayContainCall
// explains. The word "set" alone is not an anchor: UPDATE t SET ... is not
// a change.
func MayChangeSettings(query string) bool {
	return settingPairs.match(query)
}

// Bits of the settings pair tables, one per pair; the comment names the
// anchors that contain it, the pair in brackets.
const (
	sNF   uint16 = 1 << iota // co[nf]orming, set_co[nf]ig (backslashes allowed before the _)
	sOD                      // enc[od]ing
	sKS                      // bac[ks]lash
	sEO                      // tim[eo]ut
	sES                      // r[es]et, nam[es]
	sSC                      // di[sc]ard
	sTT                      // pg_se[tt]ings (backslashes allowed before the _)
	sEsc                     // [\x] [\_] ...: an escape
	sUA                      // [u&]
	sCont                    // [ '] [\'] [\n'] ...: where a continued string may resume
)

// settingPairs finds the anchors of MayChangeSettings, like MayContainCall
// by a pair of adjacent bytes that each contains.
var settingPairs = func() (f pairFilter) {
	f = pairFilter{anchorAt: settingAnchorAt}
	f.pair(sNF, "nN", "fF")
	f.pair(sOD, "oO", "dD")
	f.pair(sKS, "kK", "sS")
	f.pair(sEO, "eE", "oO")
	f.pair(sES, "eE", "sS")
	f.pair(sSC, "sS", "cC")
	f.pair(sTT, "tT", "tT")
	f.pair(sEsc, "\\", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
	f.pair(sUA, "uU", "&")
	// continuationMark: the byte before the quote is horizontal white
	// space, a backslash or the line end itself.
	f.pair(sCont, " \t\f\v\\\n\r", "'\\")
	return
}()

// settingAnchorAt verifies the anchors of the pairs in bits, whose pair is
// s[j:j+2].
func settingAnchorAt(s string, j int, bits uint16) bool {
	return bits&sNF != 0 && (hasFold(s, j-2, "conforming") || setConfigBefore(s, j-2)) ||
		bits&sOD != 0 && hasFold(s, j-3, "encoding") ||
		bits&sKS != 0 && hasFold(s, j-3, "backslash") ||
		bits&sEO != 0 && hasFold(s, j-3, "timeout") ||
		bits&sES != 0 && (hasFold(s, j-1, "reset") || hasFold(s, j-3, "names")) ||
		bits&sSC != 0 && hasFold(s, j-2, "discard") ||
		bits&sTT != 0 && hasFold(s, j-2, "settings") && endsFold(s, j-2, "pg_") ||
		bits&(sEsc|sUA) != 0 ||
		// Never the query's last byte: no string resumes there.
		bits&sCont != 0 && j+2 < len(s) && continuationMark(s, j+1)
}

// setConfigBefore reports whether s[c:] starts with "config" preceded by
// "set_", maybe with backslashes before the underscore (as in an E” body).
func setConfigBefore(s string, c int) bool {
	if !hasFold(s, c, "config") || c < 1 || s[c-1] != '_' {
		return false
	}
	k := c - 2
	for k >= 0 && s[k] == '\\' {
		k--
	}
	return hasFold(s, k-2, "set")
}

// Warm prepares the parser so that the first statement that needs it does
// not pay its start-up. Without cgo that is compiling the WebAssembly build
// of libpg_query, seconds of CPU; with cgo it does nothing. A driver calls
// it when it opens, in the background if it likes: Warm is idempotent and
// safe for concurrent use, and a Scan that needs the parser while it warms
// waits for it — it never answers without parsing.
func Warm() { warm() }

// Parser names the PostgreSQL parser this build uses: "pg_query_go (cgo)"
// or "go-pgquery (WebAssembly, no cgo)".
func Parser() string { return backendName }
