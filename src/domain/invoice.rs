//! Invoices with no I/O: which tax case a document falls under, how an amount that moved
//! splits into taxable base, VAT and IRPF, how documents are numbered, and the hash that
//! chains each issued document to the one before it in its series.
//!
//! The cases and the reasons for them are in `docs/invoices.md`; each row there is a test
//! here.
//!
//! Every amount is what changed hands (the escrow's figures): a milestone's agreed amount is
//! what the company pays, VAT included and IRPF withheld, and the commission is what the
//! platform keeps, VAT included. The invoices split those amounts; they never move money.

use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use super::state::state_enum;

/// 100 percent in basis points.
const FULL_BP: i64 = 10_000;

/// The hash a series' first document links to.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

state_enum! {
    /// What a document is: an invoice, or a credit note (factura rectificativa) correcting one.
    pub enum DocumentKind {
        Invoice = "invoice",
        CreditNote = "credit_note",
    }
}

state_enum! {
    /// Which of a released payment's two invoices a document is (or corrects).
    pub enum InvoiceRole {
        /// The expert's invoice to the company for the milestone (self-billed: the platform
        /// issues it on the expert's behalf).
        ExpertService = "expert_service",
        /// The platform's invoice to the expert for the commission kept.
        PlatformFee = "platform_fee",
    }
}

state_enum! {
    /// Whether a document was issued, or waits: for a party's fiscal data, or for the
    /// expert's acceptance of self-billing.
    pub enum InvoiceStatus {
        PendingFiscalData = "pending_fiscal_data",
        PendingAgreement = "pending_agreement",
        Issued = "issued",
    }
}

state_enum! {
    /// The VAT treatment of a document.
    pub enum TaxCase {
        /// Issuer and recipient in the same country: VAT at the domestic rate.
        Domestic = "domestic",
        /// A business recipient in another EU country with a VAT number: the recipient
        /// accounts for the VAT (reverse charge), 0 % here.
        ReverseCharge = "reverse_charge",
        /// A recipient outside the EU: not subject to Spanish VAT.
        NotSubject = "not_subject",
        /// A consumer (no VAT number) in another EU country: VAT of the issuer's country.
        EuConsumer = "eu_consumer",
    }
}

impl TaxCase {
    /// The legend the document must carry (RD 1619/2012 art. 6.1.m and the VAT law's
    /// articles), empty when the VAT is charged.
    pub fn legend(self) -> &'static str {
        match self {
            TaxCase::Domestic | TaxCase::EuConsumer => "",
            TaxCase::ReverseCharge => {
                "Inversión del sujeto pasivo (art. 84.Uno.2º Ley 37/1992 del IVA; art. 196 Directiva 2006/112/CE). Reverse charge."
            }
            TaxCase::NotSubject => {
                "Operación no sujeta a IVA por reglas de localización (art. 69.Uno.1º Ley 37/1992). Not subject to Spanish VAT."
            }
        }
    }
}

/// The platform's identity as an issuer in development; production sets its own
/// (`PLATFORM_FISCAL_*`).
pub mod development_platform {
    pub const NAME: &str = "Marketplace de Expertos S.L. (development)";
    pub const TAX_ID: &str = "B00000000";
    pub const ADDRESS: &str = "Calle Mayor 1";
    pub const POSTAL_CODE: &str = "28013";
    pub const CITY: &str = "Madrid";
    pub const COUNTRY: &str = "ES";
}

/// Where a fiscal country lies, seen from the EU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Country {
    /// An EU member, by its ISO 3166-1 alpha-2 code (Greece as `GR`).
    Eu(&'static str),
    /// Any other country.
    OutsideEu,
}

/// The EU's 27 members: ISO code, then names in English, Spanish and the country's own
/// language (lower case, without accents), as people type them in `fiscal_country`.
const EU: [(&str, &[&str]); 27] = [
    ("AT", &["austria", "osterreich"]),
    ("BE", &["belgium", "belgica", "belgie", "belgique"]),
    ("BG", &["bulgaria"]),
    ("HR", &["croatia", "croacia", "hrvatska"]),
    ("CY", &["cyprus", "chipre"]),
    (
        "CZ",
        &["czechia", "czech republic", "chequia", "republica checa"],
    ),
    ("DK", &["denmark", "dinamarca", "danmark"]),
    ("EE", &["estonia", "eesti"]),
    ("FI", &["finland", "finlandia", "suomi"]),
    ("FR", &["france", "francia"]),
    ("DE", &["germany", "alemania", "deutschland"]),
    ("GR", &["greece", "grecia", "el"]),
    ("HU", &["hungary", "hungria", "magyarorszag"]),
    ("IE", &["ireland", "irlanda", "eire"]),
    ("IT", &["italy", "italia"]),
    ("LV", &["latvia", "letonia", "latvija"]),
    ("LT", &["lithuania", "lituania", "lietuva"]),
    ("LU", &["luxembourg", "luxemburgo"]),
    ("MT", &["malta"]),
    (
        "NL",
        &["netherlands", "paises bajos", "holanda", "nederland"],
    ),
    ("PL", &["poland", "polonia", "polska"]),
    ("PT", &["portugal"]),
    ("RO", &["romania", "rumania"]),
    ("SK", &["slovakia", "eslovaquia", "slovensko"]),
    ("SI", &["slovenia", "eslovenia", "slovenija"]),
    ("ES", &["spain", "espana", "esp", "reino de espana"]),
    ("SE", &["sweden", "suecia", "sverige"]),
];

impl Country {
    /// Reads a profile's `fiscal_country`: an ISO code or a name of an EU member is that
    /// member; anything else lies outside the EU. `None` for a blank field.
    pub fn parse(text: &str) -> Option<Country> {
        let folded: String = text
            .trim()
            .chars()
            .map(|c| match c {
                'á' | 'à' | 'ä' | 'â' | 'Á' | 'À' | 'Ä' | 'Â' => 'a',
                'é' | 'è' | 'ë' | 'ê' | 'É' | 'È' => 'e',
                'í' | 'ì' | 'ï' | 'Í' => 'i',
                'ó' | 'ò' | 'ö' | 'ô' | 'Ó' | 'Ö' => 'o',
                'ú' | 'ù' | 'ü' | 'Ú' | 'Ü' => 'u',
                'ñ' | 'Ñ' => 'n',
                other => other.to_ascii_lowercase(),
            })
            .filter(|c| !matches!(c, '.' | ','))
            .collect();
        if folded.is_empty() {
            return None;
        }
        let found = EU.iter().find(|(code, names)| {
            folded.eq_ignore_ascii_case(code) || names.contains(&folded.as_str())
        });
        Some(match found {
            Some((code, _)) => Country::Eu(code),
            None => Country::OutsideEu,
        })
    }

    pub fn code(self) -> Option<&'static str> {
        match self {
            Country::Eu(code) => Some(code),
            Country::OutsideEu => None,
        }
    }
}

/// What the tax rules need to know of a party.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaxParty {
    pub country: Country,
    /// A business (a company, or a self-employed professional), not a consumer.
    pub business: bool,
    /// Holds a VAT number (intra-EU operator).
    pub vat_registered: bool,
    /// A self-employed professional (autónomo), whose invoices to Spanish businesses bear
    /// IRPF withholding.
    pub autonomo: bool,
    /// The withholding rate the professional declared, in percent (0, 7 or 15).
    pub irpf_percent: i64,
}

/// The taxes of one document: its case, the VAT rate and the IRPF rate, in basis points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taxes {
    pub case: TaxCase,
    pub vat_rate_bp: i64,
    pub irpf_rate_bp: i64,
}

/// The taxes of a document `issuer` addresses to `recipient`; `domestic_vat_bp` is the
/// standard rate of the issuer's country (a setting: Spain's 21 %).
pub fn taxes(issuer: &TaxParty, recipient: &TaxParty, domestic_vat_bp: i64) -> Taxes {
    let case = match (issuer.country, recipient.country) {
        (_, Country::OutsideEu) => TaxCase::NotSubject,
        (Country::Eu(a), Country::Eu(b)) if a == b => TaxCase::Domestic,
        (_, Country::Eu(_)) if recipient.business && recipient.vat_registered => {
            TaxCase::ReverseCharge
        }
        (_, Country::Eu(_)) => TaxCase::EuConsumer,
    };
    let vat_rate_bp = match case {
        TaxCase::Domestic | TaxCase::EuConsumer => domestic_vat_bp,
        TaxCase::ReverseCharge | TaxCase::NotSubject => 0,
    };
    // Withholding is the payer's duty when the payer is a business resident in Spain and the
    // payee a professional (Ley 35/2006 del IRPF, art. 99, and its regulation, art. 101).
    let withholds = issuer.autonomo
        && recipient.business
        && recipient.country == Country::Eu("ES")
        && issuer.country == Country::Eu("ES");
    let irpf_rate_bp = if withholds {
        issuer.irpf_percent.clamp(0, 100) * 100
    } else {
        0
    };
    Taxes {
        case,
        vat_rate_bp,
        irpf_rate_bp,
    }
}

/// An amount split into its invoice figures, all in minor units:
/// `base + vat = total`, `total − irpf = payable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Breakdown {
    pub base_minor: i64,
    pub vat_rate_bp: i64,
    pub vat_minor: i64,
    pub irpf_rate_bp: i64,
    pub irpf_minor: i64,
    /// Base plus VAT: the invoice's total.
    pub total_minor: i64,
    /// The total less the IRPF withheld: the money that moved.
    pub payable_minor: i64,
}

/// `amount × rate`, rounded half away from zero to the cent (the regulation's rounding of a
/// tax quota: to the nearest cent, a half cent up).
pub fn tax_of(amount_minor: i64, rate_bp: i64) -> i64 {
    let value = Decimal::from(amount_minor) * Decimal::from(rate_bp) / Decimal::from(FULL_BP);
    let rounded = value.round_dp_with_strategy(0, RoundingStrategy::MidpointAwayFromZero);
    i64::try_from(rounded).unwrap_or(0)
}

impl Breakdown {
    /// The figures of a taxable base at the given rates, each tax rounded from the base.
    pub fn of_base(base_minor: i64, taxes: &Taxes) -> Breakdown {
        let vat_minor = tax_of(base_minor, taxes.vat_rate_bp);
        let irpf_minor = tax_of(base_minor, taxes.irpf_rate_bp);
        Breakdown {
            base_minor,
            vat_rate_bp: taxes.vat_rate_bp,
            vat_minor,
            irpf_rate_bp: taxes.irpf_rate_bp,
            irpf_minor,
            total_minor: base_minor + vat_minor,
            payable_minor: base_minor + vat_minor - irpf_minor,
        }
    }

    /// The figures of an amount that moved (`payable_minor`, VAT included and IRPF
    /// withheld). The base is the one whose taxes, each rounded from it, add up to the
    /// amount; about one amount in six has none (the totals of two neighbouring bases differ
    /// by two cents), and then the VAT is what remains of the amount once the base is taken
    /// and the IRPF added back, as for a price quoted VAT included: within a cent of base ×
    /// rate. Either way the figures reconcile with the amount exactly. A negative amount (a
    /// credit note) splits as its opposite, negated.
    pub fn of_payable(payable_minor: i64, taxes: &Taxes) -> Breakdown {
        if payable_minor < 0 {
            return Breakdown::of_payable(-payable_minor, taxes).negated();
        }
        let net_rate = Decimal::from(FULL_BP + taxes.vat_rate_bp - taxes.irpf_rate_bp);
        let estimate = (Decimal::from(payable_minor) * Decimal::from(FULL_BP) / net_rate)
            .round_dp_with_strategy(0, RoundingStrategy::MidpointAwayFromZero);
        let estimate = i64::try_from(estimate).unwrap_or(payable_minor);
        let exact = [0, -1, 1, -2, 2]
            .into_iter()
            .map(|d| Breakdown::of_base((estimate + d).max(0), taxes))
            .find(|b| b.payable_minor == payable_minor);
        if let Some(found) = exact {
            return found;
        }
        let irpf_minor = tax_of(estimate, taxes.irpf_rate_bp);
        let vat_minor = payable_minor - estimate + irpf_minor;
        Breakdown {
            base_minor: estimate,
            vat_rate_bp: taxes.vat_rate_bp,
            vat_minor,
            irpf_rate_bp: taxes.irpf_rate_bp,
            irpf_minor,
            total_minor: estimate + vat_minor,
            payable_minor,
        }
    }

    /// The same figures with the opposite sign (a credit note of the whole).
    pub fn negated(self) -> Breakdown {
        Breakdown {
            base_minor: -self.base_minor,
            vat_minor: -self.vat_minor,
            irpf_minor: -self.irpf_minor,
            total_minor: -self.total_minor,
            payable_minor: -self.payable_minor,
            ..self
        }
    }

    /// The rates these figures were made with.
    pub fn taxes(&self, case: TaxCase) -> Taxes {
        Taxes {
            case,
            vat_rate_bp: self.vat_rate_bp,
            irpf_rate_bp: self.irpf_rate_bp,
        }
    }
}

/// The credit note's figures for `reversed_minor` (positive, at most what the invoice
/// still carries) of an invoice whose figures are `original`: the whole invoice negated
/// exactly when the whole is reversed, else the reversed amount split at the invoice's rates.
pub fn credit(original: &Breakdown, case: TaxCase, reversed_minor: i64) -> Breakdown {
    if reversed_minor == original.payable_minor {
        original.negated()
    } else {
        Breakdown::of_payable(-reversed_minor, &original.taxes(case))
    }
}

/// The issuer of a series: the platform, or an expert (self-billed on their behalf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issuer {
    Platform,
    Expert(i64),
}

impl Issuer {
    /// The series' key in storage.
    pub fn key(self) -> String {
        match self {
            Issuer::Platform => "platform".to_owned(),
            Issuer::Expert(id) => format!("expert:{id}"),
        }
    }

    /// A document's number: `<issuer>-<F|R>-<year>-<n>`, invoices (F) and credit notes (R)
    /// in series of their own, as RD 1619/2012 art. 6.1.a asks of rectifying invoices.
    pub fn number(self, kind: DocumentKind, year: i32, n: i64) -> String {
        let issuer = match self {
            Issuer::Platform => "MKT".to_owned(),
            Issuer::Expert(id) => format!("EXP{id}"),
        };
        let series = match kind {
            DocumentKind::Invoice => 'F',
            DocumentKind::CreditNote => 'R',
        };
        format!("{issuer}-{series}-{year}-{n:06}")
    }
}

/// The hash of an issued document's record: SHA-256 of the previous record's hash, a line
/// feed, and the document's content (its canonical JSON), in lower-case hex.
pub fn record_hash(previous_hash: &str, content: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(previous_hash.as_bytes());
    digest.update(b"\n");
    digest.update(content.as_bytes());
    hex::encode(digest.finalize())
}

/// One link of a series' chain as stored.
#[derive(Debug, Clone)]
pub struct Link<'a> {
    pub id: i64,
    pub number: &'a str,
    pub prev_hash: &'a str,
    pub record_hash: &'a str,
    pub content: &'a str,
}

/// Where a chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenLink {
    pub id: i64,
    pub number: String,
    pub reason: &'static str,
}

/// Walks one series' links in number order and names the first that does not hold: its
/// content no longer hashes to its record, or it does not link to the record before it.
pub fn first_broken(links: &[Link<'_>]) -> Option<BrokenLink> {
    let mut previous = GENESIS_HASH;
    for link in links {
        let broken = |reason| {
            Some(BrokenLink {
                id: link.id,
                number: link.number.to_owned(),
                reason,
            })
        };
        if link.prev_hash != previous {
            return broken("does not link to the record before it");
        }
        if record_hash(link.prev_hash, link.content) != link.record_hash {
            return broken("its content does not match its record's hash");
        }
        previous = link.record_hash;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const VAT: i64 = 2_100;

    fn party(country: &str, business: bool, vat: bool, autonomo: bool, irpf: i64) -> TaxParty {
        TaxParty {
            country: Country::parse(country).unwrap(),
            business,
            vat_registered: vat,
            autonomo,
            irpf_percent: irpf,
        }
    }

    fn es_autonomo(irpf: i64) -> TaxParty {
        party("ES", true, true, true, irpf)
    }

    /// The rows of `docs/invoices.md`'s table of cases, in its order.
    #[test]
    fn each_case_of_the_table() {
        let es_company = party("España", true, true, false, 0);
        let cases = [
            // 1. Spanish autónomo → Spanish company: 21 % VAT, IRPF at the expert's rate.
            (es_autonomo(15), es_company, TaxCase::Domestic, 2_100, 1_500),
            (es_autonomo(7), es_company, TaxCase::Domestic, 2_100, 700),
            // 2. Rate 0 declared: no withholding.
            (es_autonomo(0), es_company, TaxCase::Domestic, 2_100, 0),
            // 3. Spanish company as expert: VAT, never IRPF.
            (
                party("ES", true, true, false, 15),
                es_company,
                TaxCase::Domestic,
                2_100,
                0,
            ),
            // 4. Spanish autónomo → Spanish consumer (individual): VAT, no IRPF.
            (
                es_autonomo(15),
                party("ES", false, false, false, 0),
                TaxCase::Domestic,
                2_100,
                0,
            ),
            // 5. → EU business with a VAT number: reverse charge, no IRPF.
            (
                es_autonomo(15),
                party("Germany", true, true, false, 0),
                TaxCase::ReverseCharge,
                0,
                0,
            ),
            // 6. → EU recipient without a VAT number: Spanish VAT, no IRPF.
            (
                es_autonomo(15),
                party("FR", true, false, false, 0),
                TaxCase::EuConsumer,
                2_100,
                0,
            ),
            // 7. → outside the EU: not subject, no IRPF.
            (
                es_autonomo(15),
                party("United States", true, true, false, 0),
                TaxCase::NotSubject,
                0,
                0,
            ),
            // 8. The platform's fee to a Spanish expert: domestic VAT (the platform never
            //    withholds: it is no autónomo).
            (
                party("ES", true, true, false, 0),
                es_autonomo(15),
                TaxCase::Domestic,
                2_100,
                0,
            ),
            // 9. The platform's fee to an expert in Portugal with a VAT number.
            (
                party("ES", true, true, false, 0),
                party("Portugal", true, true, true, 0),
                TaxCase::ReverseCharge,
                0,
                0,
            ),
        ];
        for (n, (issuer, recipient, case, vat, irpf)) in cases.into_iter().enumerate() {
            let t = taxes(&issuer, &recipient, VAT);
            assert_eq!(
                (t.case, t.vat_rate_bp, t.irpf_rate_bp),
                (case, vat, irpf),
                "row {}",
                n + 1
            );
            assert_eq!(t.case.legend().is_empty(), vat > 0, "row {}", n + 1);
        }
    }

    #[test]
    fn countries_are_read_as_people_write_them() {
        for es in ["ES", "es", "España", "espana", "Spain", " ESPAÑA "] {
            assert_eq!(Country::parse(es), Some(Country::Eu("ES")), "{es}");
        }
        assert_eq!(Country::parse("Alemania"), Some(Country::Eu("DE")));
        assert_eq!(Country::parse("GR"), Some(Country::Eu("GR")));
        assert_eq!(Country::parse("México"), Some(Country::OutsideEu));
        assert_eq!(Country::parse("GB"), Some(Country::OutsideEu));
        assert_eq!(Country::parse("  "), None);
    }

    #[test]
    fn a_payable_amount_splits_exactly_with_taxes_rounded_per_line() {
        let t = Taxes {
            case: TaxCase::Domestic,
            vat_rate_bp: 2_100,
            irpf_rate_bp: 1_500,
        };
        // 1,060.00 € paid = 1,000.00 base + 210.00 VAT − 150.00 IRPF.
        let b = Breakdown::of_payable(106_000, &t);
        assert_eq!(
            (b.base_minor, b.vat_minor, b.irpf_minor, b.total_minor),
            (100_000, 21_000, 15_000, 121_000)
        );
        // 1,210.00 € with VAT only.
        let vat_only = Taxes {
            irpf_rate_bp: 0,
            ..t
        };
        let b = Breakdown::of_payable(121_000, &vat_only);
        assert_eq!((b.base_minor, b.vat_minor), (100_000, 21_000));
        // Reverse charge: the whole amount is the base.
        let none = Taxes {
            case: TaxCase::ReverseCharge,
            vat_rate_bp: 0,
            irpf_rate_bp: 0,
        };
        assert_eq!(Breakdown::of_payable(12_345, &none).base_minor, 12_345);
        // 0.12 €: base 0.10 + VAT 0.02.
        assert_eq!(Breakdown::of_payable(12, &vat_only).base_minor, 10);
    }

    #[test]
    fn every_amount_reconciles_and_vat_stays_within_a_cent() {
        let mut exact = 0;
        let total = 60_000;
        for (vat, irpf) in [(2_100, 1_500), (2_100, 700), (2_100, 0), (0, 0)] {
            let t = Taxes {
                case: TaxCase::Domestic,
                vat_rate_bp: vat,
                irpf_rate_bp: irpf,
            };
            for payable in (0..total / 4).map(|i| i * 37 + i % 7) {
                let b = Breakdown::of_payable(payable, &t);
                assert_eq!(b.base_minor + b.vat_minor, b.total_minor);
                assert_eq!(b.total_minor - b.irpf_minor, payable, "{payable}");
                assert_eq!(b.irpf_minor, tax_of(b.base_minor, irpf));
                assert!(
                    (b.vat_minor - tax_of(b.base_minor, vat)).abs() <= 1,
                    "{payable}"
                );
                assert!(b.base_minor >= 0);
                if b.vat_minor == tax_of(b.base_minor, vat) {
                    exact += 1;
                }
                let credit = Breakdown::of_payable(-payable, &t);
                assert_eq!(credit, b.negated());
            }
        }
        assert!(
            exact * 10 > total * 8,
            "most amounts split exactly: {exact}"
        );
    }

    #[test]
    fn a_credit_note_reverses_the_whole_or_a_part() {
        let t = Taxes {
            case: TaxCase::Domestic,
            vat_rate_bp: 2_100,
            irpf_rate_bp: 1_500,
        };
        let invoice = Breakdown::of_payable(106_000, &t);
        assert_eq!(
            credit(&invoice, TaxCase::Domestic, 106_000),
            invoice.negated()
        );
        let part = credit(&invoice, TaxCase::Domestic, 53_000);
        assert_eq!(
            (
                part.base_minor,
                part.vat_minor,
                part.irpf_minor,
                part.payable_minor
            ),
            (-50_000, -10_500, -7_500, -53_000)
        );
    }

    #[test]
    fn numbers_and_series() {
        assert_eq!(
            Issuer::Platform.number(DocumentKind::Invoice, 2026, 7),
            "MKT-F-2026-000007"
        );
        assert_eq!(
            Issuer::Expert(42).number(DocumentKind::CreditNote, 2027, 1),
            "EXP42-R-2027-000001"
        );
        assert_eq!(Issuer::Expert(42).key(), "expert:42");
    }

    #[test]
    fn the_chain_names_its_first_broken_link() {
        let first = record_hash(GENESIS_HASH, "{\"a\":1}");
        let second = record_hash(&first, "{\"a\":2}");
        let links = |content_two: &'static str, prev_two: &str| {
            vec![
                (
                    1,
                    "N1".to_owned(),
                    GENESIS_HASH.to_owned(),
                    first.clone(),
                    "{\"a\":1}",
                ),
                (
                    2,
                    "N2".to_owned(),
                    prev_two.to_owned(),
                    second.clone(),
                    content_two,
                ),
            ]
        };
        let check = |rows: Vec<(i64, String, String, String, &str)>| {
            let links: Vec<Link<'_>> = rows
                .iter()
                .map(|(id, number, prev, hash, content)| Link {
                    id: *id,
                    number,
                    prev_hash: prev,
                    record_hash: hash,
                    content,
                })
                .collect();
            first_broken(&links)
        };
        assert_eq!(check(links("{\"a\":2}", &first)), None);
        let tampered = check(links("{\"a\":3}", &first)).unwrap();
        assert_eq!((tampered.id, tampered.number.as_str()), (2, "N2"));
        assert_eq!(
            tampered.reason,
            "its content does not match its record's hash"
        );
        let unlinked = check(links("{\"a\":2}", GENESIS_HASH)).unwrap();
        assert_eq!(unlinked.reason, "does not link to the record before it");
    }
}
