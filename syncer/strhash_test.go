package syncer

import (
	"strconv"
	"strings"
	"testing"
)

// TestStrHash checks the registry's string hash on names of every length
// up to 80 bytes (each of its cases, and the loop): a change of any one
// byte, or of the length, changes the hash; so does the key; and the
// bits a table reads (the low ones for the slot, the top seven for the
// tag) spread over many names.
func TestStrHash(t *testing.T) {
	k, k2 := newHashKey(), newHashKey()
	base := strings.Repeat("abcdefghij", 8)
	seen := map[uint64]string{}
	for n := 0; n <= len(base); n++ {
		s := base[:n]
		h := strHash(s, k)
		if prev, ok := seen[h]; ok {
			t.Fatalf("strHash(%q) = strHash(%q)", s, prev)
		}
		seen[h] = s
		if strHash(s, k) != h {
			t.Fatalf("strHash(%q) not deterministic", s)
		}
		if n > 0 && strHash(s, k2) == h {
			t.Errorf("strHash(%q): same hash under two keys", s)
		}
		for i := range n {
			b := []byte(s)
			b[i] ^= 1
			if strHash(string(b), k) == h {
				t.Errorf("strHash(%q): byte %d flipped, same hash", s, i)
			}
		}
	}
	// 4,096 names into 64 slots by the low bits, 128 tags by the top 7.
	var slots [64]int
	var tags [128]int
	for i := range 4096 {
		h := strHash("tenant-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+strconv.Itoa(i), k)
		slots[h&63]++
		tags[h>>57]++
	}
	for i, c := range slots {
		if c < 24 || c > 110 { // 64 ± 5 standard deviations
			t.Errorf("slot %d: %d of 4096 names, want about 64", i, c)
		}
	}
	for i, c := range tags {
		if c < 6 || c > 64 { // 32 ± 5 standard deviations (and more)
			t.Errorf("tag %d: %d of 4096 names, want about 32", i, c)
		}
	}
}

// TestStrHashCollisionsNeedTheKey: names whose bytes cancel the length
// (which was XORed into the state as it is) do not collide whatever the
// key: "a" and "ba", "aXXXXXXXY" and "bXXXXXXXXY", and names of 9 to 16
// bytes whose first byte is 0x40 xor the length, each class one 64-bit
// hash under every key before.
func TestStrHashCollisionsNeedTheKey(t *testing.T) {
	classes := [][]string{{"a", "ba"}, {"aXXXXXXXY", "bXXXXXXXXY"}}
	var long []string
	for n := 9; n <= 16; n++ {
		b := []byte(strings.Repeat("X", n))
		b[0] = byte(0x40 ^ n)
		long = append(long, string(b))
	}
	classes = append(classes, long)
	for k := range 100 {
		key := newHashKey()
		for _, c := range classes {
			seen := map[uint64]string{}
			for _, s := range c {
				h := strHash(s, key)
				if other, ok := seen[h]; ok {
					t.Fatalf("key %d: %q and %q collide", k, other, s)
				}
				seen[h] = s
			}
		}
	}
}
