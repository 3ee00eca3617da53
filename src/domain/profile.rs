//! Profile rules with no I/O: slugs, fiscal completeness, verification
//! actions and the closed sets of values a profile may hold.

use super::state::state_enum;
use super::user::Role;

/// Expert levels; a new expert is `Global` (DESIGN §6).
pub const EXPERT_LEVELS: [&str; 3] = ["Global", "Pro", "Enterprise"];
pub const DEFAULT_EXPERT_LEVEL: &str = "Global";

/// Fiscal types a profile may declare.
pub const FISCAL_TYPES: [&str; 3] = ["autonomo", "empresa", "individual"];

/// IRPF withholding rates allowed, in percent.
pub const IRPF_RATES: [i64; 3] = [0, 7, 15];

/// Normalises a name or a slug into an SEO slug: lower case, ASCII only (common Latin accents
/// folded: `á` → `a`, `ñ` → `n`, `ç` → `c`, `ß` → `ss` …), every run of other characters
/// turned into one hyphen, no hyphen at either end. An empty result gives `""`.
pub fn slugify(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    let mut pending_hyphen = false;
    for c in input.chars() {
        let folded: &str = match c {
            'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' => {
                "a"
            }
            'æ' | 'Æ' => "ae",
            'ç' | 'Ç' => "c",
            'è' | 'é' | 'ê' | 'ë' | 'È' | 'É' | 'Ê' | 'Ë' => "e",
            'ì' | 'í' | 'î' | 'ï' | 'Ì' | 'Í' | 'Î' | 'Ï' => "i",
            'ñ' | 'Ñ' => "n",
            'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' | 'Ø' => {
                "o"
            }
            'ù' | 'ú' | 'û' | 'ü' | 'Ù' | 'Ú' | 'Û' | 'Ü' => "u",
            'ý' | 'ÿ' | 'Ý' => "y",
            'ß' => "ss",
            'œ' | 'Œ' => "oe",
            _ => "",
        };
        let mut push = |s: &str| {
            if pending_hyphen && !out.is_empty() {
                out.push('-');
            }
            pending_hyphen = false;
            out.push_str(s);
        };
        if !folded.is_empty() {
            push(folded);
        } else if c.is_ascii_alphanumeric() {
            push(&c.to_ascii_lowercase().to_string());
        } else {
            pending_hyphen = true;
        }
    }
    out
}

/// The slug a new expert gets from a name: [`slugify`], or `expert` when nothing is left.
pub fn expert_base_slug(name: Option<&str>) -> String {
    let slug = slugify(name.unwrap_or_default());
    let slug: String = slug.chars().take(80).collect();
    let slug = slug.trim_end_matches('-').to_owned();
    if slug.is_empty() {
        "expert".to_owned()
    } else {
        slug
    }
}

/// The first of `base`, `base-2`, `base-3` … not in `taken`.
pub fn unique_slug(base: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == base) {
        return base.to_owned();
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|candidate| !taken.iter().any(|t| t == candidate))
        .expect("an unbounded range always finds a free slug")
}

/// The key two slugs are compared by so that a legacy slug without hyphens finds the
/// profile: the normalised slug with its hyphens removed.
pub fn slug_key(slug: &str) -> String {
    slugify(slug).replace('-', "")
}

/// The fiscal fields completeness is judged on.
#[derive(Debug, Default, Clone)]
pub struct FiscalFields<'a> {
    pub tax_id: Option<&'a str>,
    pub fiscal_name: Option<&'a str>,
    pub fiscal_address: Option<&'a str>,
    pub fiscal_postal_code: Option<&'a str>,
    pub fiscal_city: Option<&'a str>,
    pub fiscal_country: Option<&'a str>,
    pub fiscal_type: Option<&'a str>,
}

/// The required fiscal fields still missing (blank counts as missing).
///
/// Rule: every profile needs `tax_id` (the NIF, or for companies the CIF), `fiscal_name`,
/// `fiscal_address`, `fiscal_postal_code`, `fiscal_city` and `fiscal_country`; experts also
/// need `fiscal_type` (it decides the withholding). `fiscal_province`, `vat_number`,
/// `irpf_rate`, `birth_date` and `commercial_registry` are optional. Admin profiles follow
/// the company rule.
pub fn missing_fiscal_fields(profile_type: Role, f: &FiscalFields<'_>) -> Vec<&'static str> {
    let blank = |v: Option<&str>| v.is_none_or(|s| s.trim().is_empty());
    let mut missing = Vec::new();
    let required = [
        ("tax_id", f.tax_id),
        ("fiscal_name", f.fiscal_name),
        ("fiscal_address", f.fiscal_address),
        ("fiscal_postal_code", f.fiscal_postal_code),
        ("fiscal_city", f.fiscal_city),
        ("fiscal_country", f.fiscal_country),
    ];
    for (name, value) in required {
        if blank(value) {
            missing.push(name);
        }
    }
    if profile_type == Role::Experto && blank(f.fiscal_type) {
        missing.push("fiscal_type");
    }
    missing
}

/// Whether every required fiscal field is present.
pub fn fiscal_data_complete(profile_type: Role, f: &FiscalFields<'_>) -> bool {
    missing_fiscal_fields(profile_type, f).is_empty()
}

state_enum! {
    /// Where a profile's verification stands (`profiles.verification_status`).
    pub enum VerificationStatus {
        Pending = "pending",
        PreEvaluated = "pre_evaluated",
        Verified = "verified",
        Rejected = "rejected",
        Resubmitted = "resubmitted",
    }
}

state_enum! {
    /// An expert's payout account at the processor (`profiles.processor_connect_status`),
    /// derived from the processor's flags; `None` before any account.
    pub enum ConnectStatus {
        /// Onboarding not finished, or under the processor's review.
        Pending = "pending",
        /// Charges and payouts enabled: transfers may go to the account.
        Active = "active",
        /// Onboarded, then disabled by the processor until more information is given.
        Restricted = "restricted",
        /// An administrator detached the account.
        Disconnected = "disconnected",
    }
}

/// An administrator's verdict on a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerificationAction {
    Verify,
    Unverify,
    Reject,
    Resubmit,
    PreEvaluate,
}

impl VerificationAction {
    /// `(is_verified, verification_status)` after the action.
    pub fn outcome(self) -> (bool, VerificationStatus) {
        match self {
            Self::Verify => (true, VerificationStatus::Verified),
            Self::Unverify => (false, VerificationStatus::Pending),
            Self::Reject => (false, VerificationStatus::Rejected),
            Self::Resubmit => (false, VerificationStatus::Resubmitted),
            Self::PreEvaluate => (false, VerificationStatus::PreEvaluated),
        }
    }
}

/// The largest profile picture accepted, in bytes.
pub const MAX_PICTURE_BYTES: usize = 2 * 1024 * 1024;
/// Pictures wider or taller than this are scaled down, keeping the aspect ratio.
pub const MAX_PICTURE_SIDE: u32 = 1024;
/// JPEG quality of stored pictures.
pub const PICTURE_JPEG_QUALITY: u8 = 85;

/// Image types accepted for profile pictures, told by their magic bytes (never the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PictureKind {
    Jpeg,
    Png,
    Webp,
}

impl PictureKind {
    /// Reads the type from the first bytes; `None` for anything else.
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Self::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Self::Png)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some(Self::Webp)
        } else {
            None
        }
    }

    fn format(self) -> image::ImageFormat {
        match self {
            Self::Jpeg => image::ImageFormat::Jpeg,
            Self::Png => image::ImageFormat::Png,
            Self::Webp => image::ImageFormat::WebP,
        }
    }
}

/// Largest picture decoded: 25 megapixels (about 100 MB as RGBA).
pub const MAX_PICTURE_PIXELS: u64 = 25_000_000;

/// Decodes a picture, scales it down to fit [`MAX_PICTURE_SIDE`] (keeping the aspect ratio),
/// flattens any transparency onto white and encodes it as JPEG at quality 85. CPU-bound: run
/// it on the blocking pool. Fails when the content is not a decodable image of `kind`.
pub fn normalise_picture(bytes: &[u8], kind: PictureKind) -> Result<Vec<u8>, String> {
    // The header is read first: a small file may announce a huge canvas (a decompression
    // bomb), refused before a single pixel is decoded.
    let (width, height) =
        image::ImageReader::with_format(std::io::Cursor::new(bytes), kind.format())
            .into_dimensions()
            .map_err(|e| e.to_string())?;
    if u64::from(width) * u64::from(height) > MAX_PICTURE_PIXELS {
        return Err(format!(
            "{width} x {height} pixels is over the {MAX_PICTURE_PIXELS}-pixel budget"
        ));
    }
    let mut reader = image::ImageReader::with_format(std::io::Cursor::new(bytes), kind.format());
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(12_000);
    limits.max_image_height = Some(12_000);
    limits.max_alloc = Some(128 * 1024 * 1024);
    reader.limits(limits);
    let decoded = reader.decode().map_err(|e| e.to_string())?;
    let resized = if decoded.width() > MAX_PICTURE_SIDE || decoded.height() > MAX_PICTURE_SIDE {
        decoded.resize(
            MAX_PICTURE_SIDE,
            MAX_PICTURE_SIDE,
            image::imageops::FilterType::Lanczos3,
        )
    } else {
        decoded
    };
    let rgba = resized.to_rgba8();
    let mut rgb = image::RgbImage::new(rgba.width(), rgba.height());
    for (x, y, pixel) in rgba.enumerate_pixels() {
        let [r, g, b, a] = pixel.0;
        let blend = |c: u8| -> u8 {
            ((u32::from(c) * u32::from(a) + 255 * (255 - u32::from(a)) + 127) / 255) as u8
        };
        rgb.put_pixel(x, y, image::Rgb([blend(r), blend(g), blend(b)]));
    }
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, PICTURE_JPEG_QUALITY)
        .encode_image(&rgb)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_lower_ascii_hyphenated() {
        assert_eq!(slugify("Ana García López"), "ana-garcia-lopez");
        assert_eq!(slugify("  José  María--Ñúñez!! "), "jose-maria-nunez");
        assert_eq!(slugify("C++ & Rust_Dev 2"), "c-rust-dev-2");
        assert_eq!(slugify("Straße"), "strasse");
        assert_eq!(slugify("---"), "");
        assert_eq!(slugify("漢字"), "");
        assert_eq!(expert_base_slug(None), "expert");
        assert_eq!(expert_base_slug(Some("漢字")), "expert");
        assert_eq!(expert_base_slug(Some("Ana")), "ana");
    }

    #[test]
    fn slug_is_idempotent() {
        for s in ["Ana García", "ana-garcia", "x--y", "ÀÉÎÕÜ ç"] {
            assert_eq!(slugify(&slugify(s)), slugify(s));
        }
    }

    #[test]
    fn unique_slugs_take_the_next_suffix() {
        assert_eq!(unique_slug("ana", &[]), "ana");
        let taken = vec!["ana".to_owned(), "ana-2".to_owned()];
        assert_eq!(unique_slug("ana", &taken), "ana-3");
        assert_eq!(unique_slug("bob", &taken), "bob");
    }

    #[test]
    fn legacy_slugs_compare_without_hyphens() {
        assert_eq!(slug_key("anagarcia"), slug_key("ana-garcia"));
        assert_eq!(slug_key("Ana-García"), "anagarcia");
        assert_ne!(slug_key("ana-garcia-2"), slug_key("anagarcia"));
    }

    #[test]
    fn fiscal_completeness_per_profile_type() {
        let full = FiscalFields {
            tax_id: Some("B12345678"),
            fiscal_name: Some("Acme SL"),
            fiscal_address: Some("Calle 1"),
            fiscal_postal_code: Some("28001"),
            fiscal_city: Some("Madrid"),
            fiscal_country: Some("ES"),
            fiscal_type: None,
        };
        assert!(fiscal_data_complete(Role::Empresa, &full));
        assert_eq!(
            missing_fiscal_fields(Role::Experto, &full),
            vec!["fiscal_type"]
        );
        let expert = FiscalFields {
            fiscal_type: Some("autonomo"),
            ..full.clone()
        };
        assert!(fiscal_data_complete(Role::Experto, &expert));
        let blank_tax = FiscalFields {
            tax_id: Some("  "),
            ..full.clone()
        };
        assert_eq!(
            missing_fiscal_fields(Role::Empresa, &blank_tax),
            vec!["tax_id"]
        );
        assert_eq!(
            missing_fiscal_fields(Role::Experto, &FiscalFields::default()).len(),
            7
        );
    }

    fn png(width: u32, height: u32, rgba: [u8; 4]) -> Vec<u8> {
        let img = image::RgbaImage::from_pixel(width, height, image::Rgba(rgba));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    /// A PNG whose header announces `width` × `height` and holds no pixel data.
    fn png_header(width: u32, height: u32) -> Vec<u8> {
        fn crc32(bytes: &[u8]) -> u32 {
            let mut crc = !0u32;
            for &b in bytes {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 == 1 {
                        (crc >> 1) ^ 0xEDB8_8320
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend(width.to_be_bytes());
        ihdr.extend(height.to_be_bytes());
        ihdr.extend([8, 0, 0, 0, 0]); // 8-bit grey, deflate, no filter, no interlace
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        for chunk in [ihdr, b"IDAT".to_vec(), b"IEND".to_vec()] {
            png.extend(u32::try_from(chunk.len() - 4).unwrap().to_be_bytes());
            png.extend(&chunk);
            png.extend(crc32(&chunk).to_be_bytes());
        }
        png
    }

    #[test]
    fn a_huge_canvas_is_refused_from_its_header() {
        let bomb = png_header(20_000, 20_000);
        assert_eq!(PictureKind::sniff(&bomb), Some(PictureKind::Png));
        let refused = normalise_picture(&bomb, PictureKind::Png).unwrap_err();
        assert!(refused.contains("pixel budget"), "{refused}");
    }

    #[test]
    fn picture_types_come_from_magic_bytes() {
        assert_eq!(
            PictureKind::sniff(&png(1, 1, [0; 4])),
            Some(PictureKind::Png)
        );
        assert_eq!(
            PictureKind::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some(PictureKind::Jpeg)
        );
        assert_eq!(
            PictureKind::sniff(b"RIFF\0\0\0\0WEBPVP8 "),
            Some(PictureKind::Webp)
        );
        assert_eq!(PictureKind::sniff(b"MZ\x90\0executable"), None);
        assert_eq!(PictureKind::sniff(b"\x7fELF"), None);
        assert_eq!(PictureKind::sniff(b""), None);
    }

    #[test]
    fn pictures_are_resized_flattened_and_jpeg() {
        let out = normalise_picture(&png(2048, 1024, [255, 0, 0, 0]), PictureKind::Png).unwrap();
        assert_eq!(PictureKind::sniff(&out), Some(PictureKind::Jpeg));
        let img = image::load_from_memory(&out).unwrap().to_rgb8();
        assert_eq!((img.width(), img.height()), (1024, 512));
        let p = img.get_pixel(10, 10).0;
        assert!(
            p.iter().all(|c| *c > 245),
            "transparent became white: {p:?}"
        );

        let out = normalise_picture(&png(300, 200, [0, 0, 255, 255]), PictureKind::Png).unwrap();
        let img = image::load_from_memory(&out).unwrap().to_rgb8();
        assert_eq!(
            (img.width(), img.height()),
            (300, 200),
            "small ones keep their size"
        );
        assert!(normalise_picture(b"\x89PNG\r\n\x1a\ngarbage", PictureKind::Png).is_err());
    }

    #[test]
    fn verification_outcomes() {
        use VerificationStatus::*;
        assert_eq!(VerificationAction::Verify.outcome(), (true, Verified));
        assert_eq!(VerificationAction::Reject.outcome(), (false, Rejected));
        assert_eq!(
            VerificationAction::PreEvaluate.outcome(),
            (false, PreEvaluated)
        );
    }
}
