//! Value parsers for arguments with a fixed set of names (`--backend`, `--cipher`,
//! `report -f`, ...): the value is parsed by the type's own `FromStr`, so its error still
//! names the fix, and the names are the argument's possible values, so shell completion
//! offers them instead of file names.

use std::ffi::OsStr;
use std::marker::PhantomData;
use std::str::FromStr;

use clap::builder::{PossibleValue, StringValueParser, TypedValueParser};
use model::{Backend, CipherSuite, CryptoChoice, Family, IpsecMode, KeyBits};

/// Parses `T` with `FromStr` and lists `names` as its possible values.
#[derive(Debug)]
pub struct Listed<T> {
    names: Vec<&'static str>,
    parsed: PhantomData<fn() -> T>,
}

impl<T> Clone for Listed<T> {
    fn clone(&self) -> Self {
        Listed {
            names: self.names.clone(),
            parsed: PhantomData,
        }
    }
}

pub fn listed<T>(names: impl IntoIterator<Item = &'static str>) -> Listed<T> {
    Listed {
        names: names.into_iter().collect(),
        parsed: PhantomData,
    }
}

impl<T> TypedValueParser for Listed<T>
where
    T: FromStr + Clone + Send + Sync + 'static,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        // The same parser clap's derive uses for a FromStr type: the same message on error.
        StringValueParser::new()
            .try_map(|s| s.parse::<T>())
            .parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.names.iter().map(|&n| PossibleValue::new(n))))
    }
}

/// A count from 1 to `max` (`--repeat`): a negative number is a value here, refused with
/// the range, where clap would take "-1" for an unknown flag.
pub fn count(max: u32) -> impl TypedValueParser<Value = u32> {
    in_range(1, i64::from(max))
}

/// A whole number from `min` to `max` (`-P`, `--mtu`, `--multi`), with the range in the
/// refusal; as [`count`], a negative number is a value, not taken for a flag (the argument
/// needs `allow_negative_numbers`).
pub fn in_range<T>(min: i64, max: i64) -> impl TypedValueParser<Value = T>
where
    T: TryFrom<i64> + Clone + Send + Sync + 'static,
{
    StringValueParser::new().try_map(move |s| match s.trim().parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => T::try_from(n).map_err(|_| format!("{n} does not fit")),
        Ok(n) => Err(format!("{n} is out of range: use {min} to {max}")),
        Err(_) => Err(format!("{s:?} is not a whole number: use {min} to {max}")),
    })
}

pub fn backend() -> Listed<Backend> {
    listed(Backend::ALL.map(Backend::name))
}

/// Every suite name the lab knows (the test below checks it against the model's suites).
const SUITE_NAMES: [&str; 10] = [
    "none",
    "aes-128-cbc",
    "aes-192-cbc",
    "aes-256-cbc",
    "aes-128-cbc-hmac-sha256",
    "aes-192-cbc-hmac-sha256",
    "aes-256-cbc-hmac-sha256",
    "aes-128-gcm",
    "aes-256-gcm",
    "chacha20-poly1305",
];

pub fn cipher() -> Listed<CipherSuite> {
    listed(SUITE_NAMES)
}

pub fn crypto() -> Listed<CryptoChoice> {
    listed(CryptoChoice::ALL.map(CryptoChoice::name))
}

pub fn key_bits() -> Listed<KeyBits> {
    listed(["128", "192", "256"])
}

pub fn hmac() -> Listed<model::Hmac> {
    listed(["none", "sha256"])
}

pub fn mode() -> Listed<IpsecMode> {
    listed(IpsecMode::ALL.map(IpsecMode::name))
}

pub fn rekey_order() -> Listed<model::rekey::RekeyOrder> {
    listed(model::rekey::RekeyOrder::ALL.map(model::rekey::RekeyOrder::name))
}

pub fn rekey_sa() -> Listed<model::rekey::RekeyTarget> {
    listed(model::rekey::RekeyTarget::ALL.map(model::rekey::RekeyTarget::name))
}

pub fn encap() -> Listed<model::EncapKind> {
    listed(["udp"])
}

pub fn family() -> Listed<Family> {
    listed(Family::ALL.map(Family::digit))
}

pub fn report_format() -> Listed<report::Format> {
    listed(report::Format::ALL.map(report::Format::name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every listed name parses back: completion never offers a value the parser refuses.
    #[test]
    fn every_listed_name_parses() {
        fn check<T>(parser: Listed<T>)
        where
            T: FromStr + Clone + Send + Sync + 'static,
            T::Err: std::error::Error + Send + Sync + 'static,
        {
            let cmd = clap::Command::new("t");
            let names: Vec<String> = parser
                .possible_values()
                .unwrap()
                .map(|v| v.get_name().to_string())
                .collect();
            assert!(!names.is_empty());
            for name in names {
                parser.parse_ref(&cmd, None, OsStr::new(&name)).unwrap();
            }
        }
        check(backend());
        check(cipher());
        check(crypto());
        check(key_bits());
        check(hmac());
        check(mode());
        check(encap());
        check(family());
        check(report_format());
        // Every suite the model has, named as it names them.
        let mut suites = vec![CipherSuite::None];
        suites.extend(CipherSuite::classic_six());
        suites.extend([KeyBits::Aes128, KeyBits::Aes256].map(|key| CipherSuite::AesGcm { key }));
        suites.push(CipherSuite::ChaCha20Poly1305);
        assert_eq!(
            suites.iter().map(CipherSuite::name).collect::<Vec<_>>(),
            SUITE_NAMES
        );
        assert_eq!(KeyBits::ALL.map(|k| k.to_string()).to_vec(), key_bits().names);
    }
}
