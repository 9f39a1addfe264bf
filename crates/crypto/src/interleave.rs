//! CBC encryption of independent messages side by side. One message's blocks form a chain
//! (each waits for the last: AES's latency, not its throughput, sets the pace), but block
//! `j` of different messages do not depend on each other. So block `j` of up to [`LANES`]
//! messages go to the AES code in one call, which keeps several in flight. A backend
//! supplies only that call: encrypt each of these blocks on its own (ECB).
//!
//! Leaves out which backend can do that call fast (`awslc`), and why `rustcrypto` does not.

use crate::primitives::{check_blocks, CbcMessage, CryptoError, AES_BLOCK_LEN};

type Block = [u8; AES_BLOCK_LEN];

/// Messages advanced together: a whole batch of a tunnel's send path (at most 64), and more
/// than the eight blocks AES-NI code keeps in flight.
pub(crate) const LANES: usize = 64;

/// Encrypts every message of `messages` in CBC mode, `LANES` at a time, through
/// `encrypt_blocks`. Lengths are checked before anything is encrypted; on a library error
/// the buffers hold partly encrypted data.
pub(crate) fn cbc_encrypt_batch(
    messages: &mut [CbcMessage<'_>],
    mut encrypt_blocks: impl FnMut(&mut [Block]) -> Result<(), CryptoError>,
) -> Result<(), CryptoError> {
    for m in messages.iter() {
        check_blocks(m.buf)?;
    }
    // Each lane's chaining value: its IV, then its last ciphertext block.
    let mut chains = [[0u8; AES_BLOCK_LEN]; LANES];
    let mut order = [0usize; LANES];
    for group in messages.chunks_mut(LANES) {
        // Longest first, so the messages still running at any block are a prefix of `order`.
        let order = &mut order[..group.len()];
        for (i, slot) in order.iter_mut().enumerate() {
            *slot = i;
        }
        order.sort_unstable_by_key(|&i| std::cmp::Reverse(group[i].buf.len()));
        for (chain, &i) in chains.iter_mut().zip(order.iter()) {
            *chain = group[i].iv;
        }
        let longest = group[order[0]].buf.len();
        for at in (0..longest).step_by(AES_BLOCK_LEN) {
            let running = order.partition_point(|&i| group[i].buf.len() > at);
            for (chain, &i) in chains.iter_mut().zip(&order[..running]) {
                xor_into(chain, &group[i].buf[at..at + AES_BLOCK_LEN]);
            }
            encrypt_blocks(&mut chains[..running])?;
            for (chain, &i) in chains.iter().zip(&order[..running]) {
                group[i].buf[at..at + AES_BLOCK_LEN].copy_from_slice(chain);
            }
        }
    }
    Ok(())
}

fn xor_into(chain: &mut Block, block: &[u8]) {
    let block: &Block = block.try_into().expect("a whole block");
    *chain = (u128::from_ne_bytes(*chain) ^ u128::from_ne_bytes(*block)).to_ne_bytes();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CryptoChoice, Implementation};

    /// Messages of `lens` bytes with distinct contents and IVs.
    fn messages(lens: &[usize]) -> Vec<(Block, Vec<u8>)> {
        lens.iter()
            .enumerate()
            .map(|(m, &len)| {
                let iv = [m as u8 ^ 0xa5; AES_BLOCK_LEN];
                (iv, (0..len).map(|i| (i * 7 + m * 31) as u8).collect())
            })
            .collect()
    }

    /// Every backend's batch gives exactly what encrypting each message alone gives, for
    /// batches above and below `LANES` and messages of different lengths (the lanes finish
    /// at different blocks), including empty ones.
    #[test]
    fn a_batch_encrypts_each_message_as_alone() {
        let key = [0x3cu8; 32];
        let mixed: Vec<usize> = (0..150).map(|m| [1408, 1408, 64, 0, 16, 1392][m % 6]).collect();
        for choice in [CryptoChoice::AwsLc, CryptoChoice::Rustcrypto] {
            let cbc = Implementation::new(choice).unwrap().aes_cbc(&key).unwrap();
            for lens in [&[1408][..], &[32, 1408, 16], &mixed] {
                let mut alone = messages(lens);
                for (iv, buf) in &mut alone {
                    cbc.encrypt(iv, buf).unwrap();
                }
                let mut batched = messages(lens);
                let mut batch: Vec<CbcMessage> = batched
                    .iter_mut()
                    .map(|(iv, buf)| CbcMessage { iv: *iv, buf })
                    .collect();
                cbc.encrypt_batch(&mut batch).unwrap();
                assert_eq!(batched, alone, "{choice:?}, {} messages", lens.len());
            }
        }
    }

    #[test]
    fn a_batch_with_a_partial_block_is_refused_before_anything_is_encrypted() {
        let cbc = Implementation::new(CryptoChoice::AwsLc)
            .unwrap()
            .aes_cbc(&[1u8; 16])
            .unwrap();
        let mut data = messages(&[32, 20]);
        let before = data.clone();
        let mut batch: Vec<CbcMessage> = data
            .iter_mut()
            .map(|(iv, buf)| CbcMessage { iv: *iv, buf })
            .collect();
        assert_eq!(
            cbc.encrypt_batch(&mut batch).unwrap_err(),
            CryptoError::NotBlockAligned { len: 20 }
        );
        assert_eq!(data, before);
    }
}
