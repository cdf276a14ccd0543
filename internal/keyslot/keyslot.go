// Package keyslot computes Redis Cluster hash slots, for the lease
// protocol and for the cluster test harness (integration/redistest).
package keyslot

import "strings"

// NumSlots is the number of Redis Cluster hash slots.
const NumSlots = 16384

// Of returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the key
// mod 16384, where only the hash tag is hashed when the key has one (the
// bytes between the first '{' and the first '}' after it, when there is at
// least one byte between them).
func Of(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return CRC16(key) % NumSlots
}

// CRC16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
// reflection), the checksum Redis Cluster uses for key slots. It is
// computed bit by bit: keys are short and a table would be package state
// for no measurable gain.
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for bit := 0; bit < 8; bit++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
