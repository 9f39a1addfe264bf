#!/bin/sh
# Recomputes the known-answer vectors in data_channel.rs with OpenSSL and Python's
# `cryptography` (OpenSSL-backed), independently of the lab's code. Prints one line per suite.
set -e
P="The quick brown fox jumps over the lazy dog"
ID=0000000000000001
IV=a0a1a2a3a4a5a6a7a8a9aaabacadaeaf
K256=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
K192=000102030405060708090a0b0c0d0e0f1011121314151617
K128=000102030405060708090a0b0c0d0e0f
HK=404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f
for bits in 128 192 256; do
  eval K=\$K$bits
  CT=$(printf %s "$P" | openssl enc -aes-$bits-cbc -K $K -iv $IV | xxd -p | tr -d '\n')
  echo "cbc$bits: $ID$IV$CT"
  MAC=$(echo -n "$ID$IV$CT" | xxd -r -p | openssl dgst -sha256 -mac HMAC -macopt hexkey:$HK | awk '{print $2}')
  echo "cbc$bits+hmac: $ID$IV$CT$MAC"
done
python3 -c "
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
P=b'The quick brown fox jumps over the lazy dog'
idb=bytes.fromhex('0000000000000001')
nonce=bytes.fromhex('40414243')+idb
for k in [bytes(range(16)), bytes(range(32))]:
    print('gcm%d:'%(len(k)*8), (idb+AESGCM(k).encrypt(nonce,P,idb)).hex())
print('chacha20-poly1305:', (idb+ChaCha20Poly1305(bytes(range(32))).encrypt(nonce,P,idb)).hex())
"
