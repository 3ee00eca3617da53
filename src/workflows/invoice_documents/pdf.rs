//! The PDF of an issued document (issue #65): an A4 page in Spanish and English, with the
//! DejaVu fonts embedded (subset) so every name prints as typed, and a QR code of the
//! verification URL. A pure function: no clock, no I/O; the same record renders the same
//! bytes.
//!
//! Text is laid out first, into a list of drawing operations per page (an overlong text flows
//! onto a next page instead of running off the sheet), and painted with krilla after.
//! Glyphs are mapped one per character with the font's own character map and advance widths
//! (no shaping engine: Latin text needs none, and the widths let amounts align right and long
//! text wrap exactly).

use super::{Content, PartyOnDocument};
use crate::domain::invoice::{DocumentKind, InvoiceRole, TaxCase};

use krilla::Document;
use krilla::color::rgb;
use krilla::geom::{PathBuilder, Point, Rect};
use krilla::metadata::{DateTime as PdfDateTime, Metadata};
use krilla::page::PageSettings;
use krilla::paint::Fill;
use krilla::text::{Font, GlyphId, KrillaGlyph};
use skrifa::charmap::Charmap;
use skrifa::instance::{LocationRef, Size};
use skrifa::metrics::GlyphMetrics;
use skrifa::{FontRef, MetadataProvider};

static REGULAR: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
static BOLD: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans-Bold.ttf");

/// The project's name, printed above the title.
const BRAND: &str = "Expert Marketplace";

// A4 in points, and the printable area inside 17 mm margins.
const PAGE_W: f32 = 595.28;
const PAGE_H: f32 = 841.89;
const MARGIN: f32 = 48.0;
const LEFT: f32 = MARGIN;
const RIGHT: f32 = PAGE_W - MARGIN;
const WIDTH: f32 = RIGHT - LEFT;
const TOP: f32 = MARGIN;
/// Where the flow stops; the page footer sits below it.
const BOTTOM: f32 = PAGE_H - MARGIN - 14.0;
/// The QR code's dark area (30 mm); its quiet zone lies around it.
const QR_SIZE: f32 = 85.0;
/// Modules of blank space around the symbol, as the QR standard asks.
const QR_QUIET: f32 = 4.0;
/// Between the header's text and the QR code: more than its quiet zone.
const QR_GAP: f32 = 24.0;
/// The figures' table, at the right: wide enough for a label and the largest amount.
const TABLE_W: f32 = 340.0;

const INK: Rgb = (0x1f, 0x23, 0x28);
const MUTED: Rgb = (0x5f, 0x66, 0x70);
const ACCENT: Rgb = (0x1d, 0x4e, 0x89);
const RULE: Rgb = (0xc8, 0xcd, 0xd3);
const SHADE: Rgb = (0xee, 0xf1, 0xf5);

type Rgb = (u8, u8, u8);

/// The invoice's PDF could not be made (a font or the QR code failed): a bug, not bad input.
#[derive(Debug, thiserror::Error)]
#[error("the invoice's PDF could not be made: {0}")]
pub struct PdfError(String);

/// The PDF of an issued document: A4, fonts embedded, every field of its content, its legend,
/// and a QR code of its verification URL (which carries the record's hash).
pub fn render(content: &Content, record_hash: &str, verify_url: &str) -> Result<Vec<u8>, PdfError> {
    let fonts = Fonts {
        regular: Face::load(REGULAR)?,
        bold: Face::load(BOLD)?,
    };
    let qr = qrcode::QrCode::new(verify_url.as_bytes())
        .map_err(|e| PdfError(format!("QR code: {e}")))?;
    let mut sheet = Sheet::new(&fonts);
    header(&mut sheet, content, &qr);
    parties(&mut sheet, &content.issuer, &content.recipient);
    details(&mut sheet, content);
    amounts(&mut sheet, content);
    if !content.legend.trim().is_empty() {
        sheet.gap(14.0);
        sheet.paragraph(LABEL, "MENCIÓN LEGAL / LEGAL NOTICE", LEFT, WIDTH);
        sheet.paragraph(BODY, &content.legend, LEFT, WIDTH);
    }
    verification(&mut sheet, record_hash, verify_url);
    sheet.footers(&content.number);
    paint(&fonts, &sheet.pages, metadata(content))
}

/// How a run of text looks.
#[derive(Debug, Clone, Copy)]
struct Style {
    bold: bool,
    size: f32,
    color: Rgb,
}

const BODY: Style = Style::new(false, 9.0, INK);
const STRONG: Style = Style::new(true, 9.0, INK);
const SMALL: Style = Style::new(false, 7.5, MUTED);
const LABEL: Style = Style::new(true, 7.5, MUTED);

impl Style {
    const fn new(bold: bool, size: f32, color: Rgb) -> Self {
        Style { bold, size, color }
    }

    const fn sized(self, size: f32) -> Self {
        Style { size, ..self }
    }

    const fn colored(self, color: Rgb) -> Self {
        Style { color, ..self }
    }

    /// The height of a line of this text.
    fn leading(self) -> f32 {
        self.size * 1.4
    }
}

/// Lines of text, each in its style.
type Lines = Vec<(Style, String)>;

/// One drawing operation, placed on its page (y grows downwards, text at its baseline).
enum Op {
    Text {
        x: f32,
        y: f32,
        style: Style,
        text: String,
    },
    /// Filled rectangles `(x, y, w, h)` of one colour, drawn as one path.
    Rects {
        rects: Vec<(f32, f32, f32, f32)>,
        color: Rgb,
    },
}

/// A font for drawing (krilla) and for measuring (its character map and advance widths).
struct Face {
    font: Font,
    charmap: Charmap<'static>,
    metrics: GlyphMetrics<'static>,
}

impl Face {
    fn load(data: &'static [u8]) -> Result<Face, PdfError> {
        let font_ref = FontRef::new(data).map_err(|e| PdfError(format!("font: {e}")))?;
        let font = Font::new(data.into(), 0).ok_or_else(|| PdfError("font: unreadable".into()))?;
        Ok(Face {
            font,
            charmap: font_ref.charmap(),
            // At size 1, advances come in ems: what krilla's glyphs take.
            metrics: font_ref.glyph_metrics(Size::new(1.0), LocationRef::default()),
        })
    }

    /// The glyph of `c` (`.notdef` when the font lacks it) and its advance in ems.
    fn glyph(&self, c: char) -> (GlyphId, f32) {
        let id = self.charmap.map(c).unwrap_or_default();
        let advance = self.metrics.advance_width(id).unwrap_or(0.0);
        (GlyphId::new(id.to_u32()), advance)
    }

    fn width(&self, text: &str, size: f32) -> f32 {
        text.chars().map(|c| self.glyph(c).1).sum::<f32>() * size
    }

    /// One glyph per character, each mapped back to its character so the text extracts.
    fn glyphs(&self, text: &str) -> Vec<KrillaGlyph> {
        text.char_indices()
            .map(|(i, c)| {
                let (id, advance) = self.glyph(c);
                KrillaGlyph::new(id, advance, 0.0, 0.0, 0.0, i..i + c.len_utf8(), None)
            })
            .collect()
    }

    /// `text`'s words in lines no wider than `width`; a word wider than a line is cut where
    /// it overflows. Runs of whitespace (line breaks included) become one space.
    fn wrap(&self, text: &str, size: f32, width: f32) -> Vec<String> {
        let space = self.width(" ", size);
        let (mut lines, mut line, mut used) = (Vec::new(), String::new(), 0.0);
        for word in text.split_whitespace() {
            let w = self.width(word, size);
            if !line.is_empty() && used + space + w <= width {
                line.push(' ');
                line.push_str(word);
                used += space + w;
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
                used = 0.0;
            }
            for c in word.chars() {
                let cw = self.glyph(c).1 * size;
                if !line.is_empty() && used + cw > width {
                    lines.push(std::mem::take(&mut line));
                    used = 0.0;
                }
                line.push(c);
                used += cw;
            }
        }
        if !line.is_empty() {
            lines.push(line);
        }
        lines
    }
}

struct Fonts {
    regular: Face,
    bold: Face,
}

impl Fonts {
    fn face(&self, style: Style) -> &Face {
        if style.bold {
            &self.bold
        } else {
            &self.regular
        }
    }
}

/// The pages being laid out, and where the next line goes.
struct Sheet<'f> {
    fonts: &'f Fonts,
    pages: Vec<Vec<Op>>,
    y: f32,
}

impl<'f> Sheet<'f> {
    fn new(fonts: &'f Fonts) -> Self {
        Sheet {
            fonts,
            pages: vec![Vec::new()],
            y: TOP,
        }
    }

    fn width(&self, style: Style, text: &str) -> f32 {
        self.fonts.face(style).width(text, style.size)
    }

    fn wrap(&self, style: Style, text: &str, width: f32) -> Vec<String> {
        self.fonts.face(style).wrap(text, style.size, width)
    }

    /// Adds `op` to the page being laid out.
    fn push(&mut self, op: Op) {
        match self.pages.last_mut() {
            Some(page) => page.push(op),
            None => self.pages.push(vec![op]),
        }
    }

    /// Takes `height` of the flow, on a new page when this one has no room; answers its top.
    fn take(&mut self, height: f32) -> f32 {
        // The slack absorbs rounding when a block was measured to end exactly at the bottom.
        if self.y + height > BOTTOM + 0.5 && self.y > TOP {
            self.pages.push(Vec::new());
            self.y = TOP;
        }
        let top = self.y;
        self.y += height;
        top
    }

    fn gap(&mut self, height: f32) {
        self.y = (self.y + height).min(BOTTOM);
    }

    /// Text whose baseline sits one line below `top`.
    fn text(&mut self, x: f32, top: f32, style: Style, text: &str) {
        let y = top + style.size;
        let text = text.to_owned();
        self.push(Op::Text { x, y, style, text });
    }

    /// Text ending at `right` (amounts, captions).
    fn text_right(&mut self, right: f32, top: f32, style: Style, text: &str) {
        let x = right - self.width(style, text);
        self.text(x, top, style, text);
    }

    fn rect(&mut self, x: f32, y: f32, w: f32, h: f32, color: Rgb) {
        let rects = vec![(x, y, w, h)];
        self.push(Op::Rects { rects, color });
    }

    /// A hairline across the content's width.
    fn rule(&mut self) {
        let top = self.take(8.0);
        self.rect(LEFT, top + 3.0, WIDTH, 0.6, RULE);
    }

    /// `text` wrapped to `width` from `x`, line after line in the flow.
    fn paragraph(&mut self, style: Style, text: &str, x: f32, width: f32) {
        for line in self.wrap(style, text, width) {
            let top = self.take(style.leading());
            self.text(x, top, style, &line);
        }
    }

    /// Columns side by side, each a list of lines wrapped to its width, row by row (a page
    /// break falls between rows, never through one).
    fn columns(&mut self, columns: &[(f32, f32, Lines)]) {
        let wrapped: Vec<Lines> = columns
            .iter()
            .map(|(_, width, lines)| {
                let mut out = Vec::new();
                for (style, text) in lines {
                    let parts = self.wrap(*style, text, *width);
                    out.extend(parts.into_iter().map(|line| (*style, line)));
                }
                out
            })
            .collect();
        let rows = wrapped.iter().map(Vec::len).max().unwrap_or(0);
        for row in 0..rows {
            let cells: Vec<(f32, Style, &str)> = columns
                .iter()
                .zip(&wrapped)
                .filter_map(|((x, _, _), lines)| lines.get(row).map(|(s, t)| (*x, *s, t.as_str())))
                .collect();
            let height = cells
                .iter()
                .map(|(_, s, _)| s.leading())
                .fold(0.0, f32::max);
            let size = cells.iter().map(|(_, s, _)| s.size).fold(0.0, f32::max);
            let top = self.take(height);
            // One baseline for the row, whatever each cell's size.
            for (x, style, text) in cells {
                self.text(x, top + size - style.size, style, text);
            }
        }
    }

    /// The document's number and the page count at the foot of every page.
    fn footers(&mut self, number: &str) {
        let count = self.pages.len();
        for (i, ops) in self.pages.iter_mut().enumerate() {
            let text = format!("{BRAND} · {number} · {}/{count}", i + 1);
            let x = (PAGE_W - self.fonts.regular.width(&text, SMALL.size)) / 2.0;
            let y = PAGE_H - MARGIN / 2.0;
            ops.push(Op::Text {
                x,
                y,
                style: SMALL,
                text,
            });
        }
    }
}

/// Brand, title, number, date, what the document is and the QR code at the top right.
fn header(sheet: &mut Sheet, c: &Content, qr: &qrcode::QrCode) {
    let qr_bottom = qr_code(sheet, qr);
    // The text keeps clear of the QR code and its quiet zone.
    let width = WIDTH - QR_SIZE - QR_GAP;
    let title = match c.kind {
        DocumentKind::Invoice => "FACTURA / INVOICE",
        DocumentKind::CreditNote => "FACTURA RECTIFICATIVA / CREDIT NOTE",
    };
    let brand = Style::new(true, 11.0, ACCENT);
    let top = sheet.take(brand.leading());
    sheet.text(LEFT, top, brand, BRAND);
    sheet.paragraph(Style::new(true, 17.0, INK), title, LEFT, width);
    sheet.gap(6.0);

    let date = c.issued_at.format("%Y-%m-%d").to_string();
    let rows = [
        ("Número / Number", c.number.clone()),
        ("Fecha de emisión / Date of issue", date),
        ("Operación / Supply", role_label(c.role).to_owned()),
        (
            "Régimen de IVA / VAT treatment",
            tax_case_label(c.tax_case).to_owned(),
        ),
    ];
    let label_w = rows
        .iter()
        .map(|(l, _)| sheet.width(SMALL, l))
        .fold(0.0, f32::max)
        + 10.0;
    for (label, value) in rows {
        let columns = [
            (LEFT, label_w, vec![(SMALL, label.to_owned())]),
            (LEFT + label_w, width - label_w, vec![(STRONG, value)]),
        ];
        sheet.columns(&columns);
    }
    if let Some(corrected) = &c.corrects {
        sheet.gap(4.0);
        let line = format!("Rectifica la factura / Corrects invoice {corrected}");
        sheet.paragraph(STRONG.colored(ACCENT), &line, LEFT, width);
    }
    if c.self_billed {
        sheet.gap(4.0);
        let note = "Factura emitida por el destinatario (autofacturación) / Self-billed invoice, \
                    issued by the recipient on the issuer's behalf";
        sheet.paragraph(SMALL, note, LEFT, width);
    }
    sheet.y = sheet.y.max(qr_bottom);
    sheet.gap(14.0);
}

/// Draws the QR code's dark modules at the top right of the first page (one rectangle per
/// horizontal run, so no seams show between modules); answers the bottom of its caption.
fn qr_code(sheet: &mut Sheet, qr: &qrcode::QrCode) -> f32 {
    let modules = qr.width();
    let module = QR_SIZE / modules as f32;
    // Its quiet zone (4 modules) lies in the page's margin above and to the right.
    let (x0, y0) = (RIGHT - QR_SIZE, TOP);
    let colors = qr.to_colors();
    let mut rects = Vec::new();
    for (row, line) in colors.chunks(modules).enumerate() {
        let mut col = 0;
        while col < line.len() {
            let run = line[col..]
                .iter()
                .take_while(|m| **m == qrcode::Color::Dark)
                .count();
            if run > 0 {
                let (x, y) = (x0 + col as f32 * module, y0 + row as f32 * module);
                rects.push((x, y, run as f32 * module, module));
            }
            col += run.max(1);
        }
    }
    sheet.push(Op::Rects {
        rects,
        color: (0, 0, 0),
    });
    let caption = "Verificar / Verify";
    let caption_top = y0 + QR_SIZE + QR_QUIET * module;
    let caption_x = RIGHT - (QR_SIZE + sheet.width(SMALL, caption)) / 2.0;
    sheet.text(caption_x, caption_top, SMALL, caption);
    caption_top + SMALL.leading()
}

fn role_label(role: InvoiceRole) -> &'static str {
    match role {
        InvoiceRole::ExpertService => "Servicios profesionales / Professional services",
        InvoiceRole::PlatformFee => "Comisión de la plataforma / Platform fee",
    }
}

fn tax_case_label(case: TaxCase) -> &'static str {
    match case {
        TaxCase::Domestic => "Nacional / Domestic",
        TaxCase::ReverseCharge => "Inversión del sujeto pasivo / Reverse charge",
        TaxCase::NotSubject => "No sujeta / Not subject to Spanish VAT",
        TaxCase::EuConsumer => "Consumidor en la UE / EU consumer",
    }
}

/// Issuer and recipient side by side.
fn parties(sheet: &mut Sheet, issuer: &PartyOnDocument, recipient: &PartyOnDocument) {
    let width = (WIDTH - 24.0) / 2.0;
    let right = LEFT + width + 24.0;
    let top = sheet.take(LABEL.leading() + 4.0);
    sheet.text(LEFT, top, LABEL, "EMISOR / ISSUER");
    sheet.text(right, top, LABEL, "DESTINATARIO / RECIPIENT");
    sheet.rect(LEFT, top + LABEL.leading(), width, 0.6, RULE);
    sheet.rect(right, top + LABEL.leading(), width, 0.6, RULE);
    sheet.gap(3.0);
    sheet.columns(&[
        (LEFT, width, party(issuer)),
        (right, width, party(recipient)),
    ]);
    sheet.gap(16.0);
}

/// A party's lines: name, tax ids, address.
fn party(p: &PartyOnDocument) -> Lines {
    let name = STRONG.sized(10.5);
    let mut lines = vec![
        (name, p.name.clone()),
        (BODY, format!("NIF / Tax ID: {}", p.tax_id)),
    ];
    if let Some(vat) = &p.vat_number {
        lines.push((BODY, format!("NIF-IVA / VAT no.: {vat}")));
    }
    lines.push((BODY, p.address.clone()));
    lines.push((BODY, format!("{} {}", p.postal_code, p.city)));
    if let Some(province) = &p.province {
        lines.push((BODY, province.clone()));
    }
    lines.push((BODY, p.country.clone()));
    lines
}

/// What was supplied, and the records it belongs to.
fn details(sheet: &mut Sheet, c: &Content) {
    sheet.paragraph(LABEL, "CONCEPTO / DESCRIPTION", LEFT, WIDTH);
    sheet.paragraph(BODY.sized(10.0), &c.description, LEFT, WIDTH);
    sheet.gap(2.0);
    let mut ids = format!("Proyecto / Project #{}", c.project_id);
    if let Some(milestone) = c.milestone_id {
        ids.push_str(&format!("   ·   Hito / Milestone #{milestone}"));
    }
    ids.push_str(&format!("   ·   Pago / Payment #{}", c.payment_id));
    sheet.paragraph(SMALL, &ids, LEFT, WIDTH);
    sheet.gap(16.0);
}

/// The figures, right-aligned in a table at the right; the amount payable stands out.
fn amounts(sheet: &mut Sheet, c: &Content) {
    let b = &c.breakdown;
    let cur = c.currency.as_str();
    let mut rows = vec![
        (
            "Base imponible / Taxable base".to_owned(),
            money(b.base_minor, cur),
        ),
        (
            format!("IVA / VAT {}", rate(b.vat_rate_bp)),
            money(b.vat_minor, cur),
        ),
        ("Total".to_owned(), money(b.total_minor, cur)),
    ];
    // Only professionals are withheld: no line at all when there is no withholding.
    if b.irpf_rate_bp > 0 {
        let label = format!("Retención IRPF / IRPF withholding {}", rate(b.irpf_rate_bp));
        rows.push((label, money(b.irpf_minor, cur)));
    }
    let (x, width) = (RIGHT - TABLE_W, TABLE_W);
    for (label, amount) in rows {
        let top = sheet.take(BODY.leading() + 3.0);
        sheet.text(x, top + 1.5, BODY, &label);
        sheet.text_right(RIGHT, top + 1.5, BODY, &amount);
        sheet.rect(x, top + BODY.leading() + 2.5, width, 0.4, RULE);
    }
    let (label, big) = (STRONG.sized(9.5), STRONG.sized(11.0));
    let top = sheet.take(big.leading() + 12.0);
    sheet.rect(x, top + 4.0, width, big.leading() + 6.0, SHADE);
    // The label sits on the amount's baseline.
    let (label_top, text) = (
        top + 7.0 + big.size - label.size,
        "Importe a pagar / Amount payable",
    );
    sheet.text(x + 6.0, label_top, label, text);
    sheet.text_right(RIGHT - 6.0, top + 7.0, big, &money(b.payable_minor, cur));
}

/// The record's hash and where to verify it, at the foot of the last page when it fits.
fn verification(sheet: &mut Sheet, record_hash: &str, verify_url: &str) {
    let label = "Huella del registro / Record hash:";
    let url_label = "Verifique este documento en / Verify this document at:";
    // The URL stays on one line when a readable size allows it, for copying and searching.
    let url_size = (0.99 * WIDTH / sheet.width(SMALL.sized(1.0), verify_url)).min(7.5);
    let url_style = SMALL.sized(url_size.max(5.5)).colored(INK);
    let url_lines = sheet.wrap(url_style, verify_url, WIDTH);
    let height = 8.0
        + LABEL.leading()
        + 2.5 * SMALL.leading()
        + url_lines.len() as f32 * url_style.leading();
    sheet.gap(18.0);
    // Kept whole: on a new page when this one has no room for it, else at its foot.
    sheet.y = sheet.take(height).max(BOTTOM - height);
    sheet.rule();
    sheet.paragraph(LABEL, "VERIFICACIÓN / VERIFICATION", LEFT, WIDTH);
    let top = sheet.take(SMALL.leading());
    sheet.text(LEFT, top, SMALL, label);
    let hash_x = LEFT + sheet.width(SMALL, label) + 6.0;
    sheet.text(hash_x, top, SMALL.colored(INK), record_hash);
    sheet.gap(SMALL.leading() * 0.5);
    sheet.paragraph(SMALL, url_label, LEFT, WIDTH);
    for line in url_lines {
        let top = sheet.take(url_style.leading());
        sheet.text(LEFT, top, url_style, &line);
    }
}

/// `-1234567, "eur"` → `-12,345.67 EUR`: integer arithmetic only, exact for every amount.
fn money(minor: i64, currency: &str) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    let units = abs / 100;
    let digits = units.to_string();
    let mut grouped = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(d);
    }
    format!(
        "{sign}{grouped}.{:02} {}",
        abs % 100,
        currency.to_uppercase()
    )
}

/// Basis points as a percentage without trailing zeros: `2100` → `21 %`, `1050` → `10.5 %`.
fn rate(bp: i64) -> String {
    let sign = if bp < 0 { "-" } else { "" };
    let abs = bp.unsigned_abs();
    let (whole, frac) = (abs / 100, abs % 100);
    match frac {
        0 => format!("{sign}{whole} %"),
        f if f.is_multiple_of(10) => format!("{sign}{whole}.{} %", f / 10),
        f => format!("{sign}{whole}.{f:02} %"),
    }
}

/// The document's title and date of issue in its metadata (no clock: the output is stable).
fn metadata(c: &Content) -> Metadata {
    use chrono::{Datelike, Timelike};
    let title = match c.kind {
        DocumentKind::Invoice => format!("Factura / Invoice {}", c.number),
        DocumentKind::CreditNote => format!("Factura rectificativa / Credit note {}", c.number),
    };
    let t = c.issued_at;
    let mut metadata = Metadata::new().title(title).creator(BRAND.to_owned());
    if let Ok(year) = u16::try_from(t.year()) {
        // Each fits in u8: month ≤ 12, day ≤ 31, hour ≤ 23, minute and second ≤ 59.
        let date = PdfDateTime::new(year)
            .month(t.month() as u8)
            .day(t.day() as u8)
            .hour(t.hour() as u8)
            .minute(t.minute() as u8)
            .second(t.second() as u8)
            .utc_offset_hour(0);
        metadata = metadata.creation_date(date);
    }
    metadata
}

/// Paints the laid-out pages.
fn paint(fonts: &Fonts, pages: &[Vec<Op>], metadata: Metadata) -> Result<Vec<u8>, PdfError> {
    let settings =
        PageSettings::from_wh(PAGE_W, PAGE_H).ok_or_else(|| PdfError("page size".into()))?;
    let mut document = Document::new();
    document.set_metadata(metadata);
    for ops in pages {
        let mut page = document.start_page_with(settings.clone());
        let mut surface = page.surface();
        for op in ops {
            match op {
                Op::Text { x, y, style, text } => {
                    let face = fonts.face(*style);
                    surface.set_fill(Some(fill(style.color)));
                    let glyphs = face.glyphs(text);
                    let start = Point::from_xy(*x, *y);
                    surface.draw_glyphs(start, &glyphs, face.font.clone(), text, style.size, false);
                }
                Op::Rects { rects, color } => {
                    let mut path = PathBuilder::new();
                    for &(x, y, w, h) in rects {
                        if let Some(rect) = Rect::from_xywh(x, y, w, h) {
                            path.push_rect(rect);
                        }
                    }
                    // An empty path (no rectangle) draws nothing.
                    if let Some(path) = path.finish() {
                        surface.set_fill(Some(fill(*color)));
                        surface.draw_path(&path);
                    }
                }
            }
        }
        surface.finish();
        page.finish();
    }
    document.finish().map_err(|e| PdfError(e.to_string()))
}

fn fill((r, g, b): Rgb) -> Fill {
    Fill {
        paint: rgb::Color::new(r, g, b).into(),
        ..Fill::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::invoice::Breakdown;
    use chrono::{TimeZone, Utc};
    use std::process::Command;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const HASH: &str = "3f9a1c0b7e2d4f6a8b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6";

    fn party(
        name: &str,
        tax_id: &str,
        vat: Option<&str>,
        province: Option<&str>,
    ) -> PartyOnDocument {
        PartyOnDocument {
            name: name.into(),
            tax_id: tax_id.into(),
            vat_number: vat.map(Into::into),
            address: "Calle de la Peña Ñandú 12, 3º B".into(),
            postal_code: "28004".into(),
            city: "Madrid".into(),
            province: province.map(Into::into),
            country: "España".into(),
        }
    }

    /// An expert's self-billed invoice with IRPF withheld.
    fn invoice() -> Content {
        Content {
            number: "EXP42-F-2026-000017".into(),
            kind: DocumentKind::Invoice,
            role: InvoiceRole::ExpertService,
            issued_at: Utc.with_ymd_and_hms(2026, 3, 14, 9, 26, 53).unwrap(),
            self_billed: true,
            self_billing_agreed_at: None,
            issuer: party("José Ñúñez García", "12345678Z", None, Some("Madrid")),
            recipient: party("Acme Ibérica, S.L.", "B12345678", Some("ESB12345678"), None),
            description: "Professional services: project \"Migración del ERP a la nube\", \
                          milestone \"Análisis y diseño técnico\""
                .into(),
            project_id: 1204,
            milestone_id: Some(5521),
            payment_id: 98765,
            currency: "eur".into(),
            tax_case: TaxCase::Domestic,
            legend: String::new(),
            breakdown: Breakdown {
                base_minor: 1_234_567,
                vat_rate_bp: 2100,
                vat_minor: 259_259,
                irpf_rate_bp: 1500,
                irpf_minor: 185_185,
                total_minor: 1_493_826,
                payable_minor: 1_308_641,
            },
            corrects: None,
        }
    }

    /// The platform's credit note to an expert in another EU country: reverse charge.
    fn credit_note() -> Content {
        Content {
            number: "MKT-R-2026-000003".into(),
            kind: DocumentKind::CreditNote,
            role: InvoiceRole::PlatformFee,
            self_billed: false,
            self_billing_agreed_at: None,
            issuer: party(
                "Expert Marketplace S.L.",
                "B87654321",
                Some("ESB87654321"),
                None,
            ),
            recipient: PartyOnDocument {
                country: "France".into(),
                ..party(
                    "Zoë Lefèvre Conseil",
                    "FR40303265045",
                    Some("FR40303265045"),
                    None,
                )
            },
            tax_case: TaxCase::ReverseCharge,
            legend: TaxCase::ReverseCharge.legend().into(),
            breakdown: Breakdown {
                base_minor: -1_234_567,
                vat_rate_bp: 0,
                vat_minor: 0,
                irpf_rate_bp: 0,
                irpf_minor: 0,
                total_minor: -1_234_567,
                payable_minor: -1_234_567,
            },
            corrects: Some("MKT-F-2026-000011".into()),
            ..invoice()
        }
    }

    fn url(number: &str) -> String {
        format!("https://marketplace.example.com/invoices/verify?number={number}&hash={HASH}")
    }

    /// The page's text as `pdftotext -layout` extracts it; `None` when poppler-utils is not
    /// installed, unless `PDF_TOOLS_REQUIRED` is set (as `.ci/run` does, having installed it).
    fn text_of(pdf: &[u8]) -> Option<String> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "invoice-pdf-{}-{}.pdf",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, pdf).unwrap();
        let out = Command::new("pdftotext")
            .arg("-layout")
            .arg(&path)
            .arg("-")
            .output();
        std::fs::remove_file(&path).unwrap();
        let out = match out {
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && std::env::var_os("PDF_TOOLS_REQUIRED").is_none() =>
            {
                eprintln!("pdftotext not installed (Debian: poppler-utils): text not checked");
                return None;
            }
            out => out.expect("pdftotext must be installed (Debian: poppler-utils)"),
        };
        assert!(
            out.status.success(),
            "pdftotext: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8(out.stdout).unwrap())
    }

    fn assert_pdf_with_fonts(pdf: &[u8]) {
        assert!(pdf.starts_with(b"%PDF-"));
        let has = |marker: &[u8]| pdf.windows(marker.len()).any(|w| w == marker);
        assert!(has(b"/FontFile2") || has(b"/FontFile3"), "no embedded font");
    }

    fn assert_shows(text: &str, expected: &[&str]) {
        for want in expected {
            assert!(
                text.contains(want),
                "{want:?} missing from the PDF's text:\n{text}"
            );
        }
    }

    #[test]
    fn an_invoice_shows_every_field() {
        let c = invoice();
        let pdf = render(&c, HASH, &url(&c.number)).unwrap();
        assert_pdf_with_fonts(&pdf);
        let Some(text) = text_of(&pdf) else {
            return;
        };
        assert_shows(
            &text,
            &[
                "FACTURA / INVOICE",
                "Expert Marketplace",
                "EXP42-F-2026-000017",
                "2026-03-14",
                "Servicios profesionales / Professional services",
                "Nacional / Domestic",
                "Factura emitida por el destinatario (autofacturación)",
                "José Ñúñez García",
                "12345678Z",
                "Acme Ibérica, S.L.",
                "B12345678",
                "ESB12345678",
                "Calle de la Peña Ñandú 12, 3º B",
                "28004 Madrid",
                "España",
                "Migración del ERP a la nube",
                "#1204",
                "#5521",
                "#98765",
                "12,345.67 EUR",
                "IVA / VAT 21 %",
                "2,592.59 EUR",
                "IRPF withholding 15 %",
                "1,851.85 EUR",
                "14,938.26 EUR",
                "13,086.41 EUR",
                HASH,
                &url(&c.number),
            ],
        );
        assert!(!text.contains("Corrects invoice"));
    }

    #[test]
    fn a_credit_note_shows_its_negative_figures_legend_and_the_invoice_it_corrects() {
        let c = credit_note();
        let pdf = render(&c, HASH, &url(&c.number)).unwrap();
        assert_pdf_with_fonts(&pdf);
        let Some(text) = text_of(&pdf) else {
            return;
        };
        assert_shows(
            &text,
            &[
                "FACTURA RECTIFICATIVA / CREDIT NOTE",
                "MKT-R-2026-000003",
                "Comisión de la plataforma / Platform fee",
                "Inversión del sujeto pasivo / Reverse charge",
                "Rectifica la factura / Corrects invoice MKT-F-2026-000011",
                "Expert Marketplace S.L.",
                "B87654321",
                "Zoë Lefèvre Conseil",
                "FR40303265045",
                "France",
                "-12,345.67 EUR",
                "IVA / VAT 0 %",
                "Inversión del sujeto pasivo (art. 84.Uno.2º",
                "Ley 37/1992 del IVA",
                HASH,
                &url(&c.number),
            ],
        );
        assert!(!text.contains("IRPF"), "no withholding line without IRPF");
        assert!(!text.contains("autofacturación"));
    }

    #[test]
    fn the_same_record_renders_the_same_bytes() {
        let c = credit_note();
        let once = render(&c, HASH, &url(&c.number)).unwrap();
        assert_eq!(once, render(&c, HASH, &url(&c.number)).unwrap());
    }

    #[test]
    fn an_overlong_text_flows_onto_a_second_page() {
        let mut c = invoice();
        c.description = "Una descripción muy larga del hito. ".repeat(80);
        c.recipient.name = "N".repeat(400);
        let pdf = render(&c, HASH, &url(&c.number)).unwrap();
        let Some(text) = text_of(&pdf) else {
            return;
        };
        assert_shows(
            &text,
            &["1/2", "2/2", "13,086.41 EUR", HASH, &"N".repeat(20)],
        );
    }

    #[test]
    fn amounts_and_rates_are_formatted_from_integers() {
        assert_eq!(money(-1_234_567, "eur"), "-12,345.67 EUR");
        assert_eq!(money(123_456_789_012, "usd"), "1,234,567,890.12 USD");
        assert_eq!(money(100_000, "eur"), "1,000.00 EUR");
        assert_eq!(money(99_999, "eur"), "999.99 EUR");
        assert_eq!(money(5, "eur"), "0.05 EUR");
        assert_eq!(money(-5, "eur"), "-0.05 EUR");
        assert_eq!(money(0, "eur"), "0.00 EUR");
        assert_eq!(money(i64::MIN, "eur"), "-92,233,720,368,547,758.08 EUR");
        assert_eq!(rate(2100), "21 %");
        assert_eq!(rate(700), "7 %");
        assert_eq!(rate(1050), "10.5 %");
        assert_eq!(rate(1025), "10.25 %");
        assert_eq!(rate(5), "0.05 %");
        assert_eq!(rate(0), "0 %");
    }

    #[test]
    fn wrapped_lines_fit_their_width_and_keep_every_word() {
        let face = Face::load(REGULAR).unwrap();
        let text = format!("{} {} fin", TaxCase::NotSubject.legend(), "x".repeat(200));
        let lines = face.wrap(&text, 9.0, 200.0);
        assert!(lines.len() > 3);
        assert!(lines.iter().all(|l| face.width(l, 9.0) <= 200.0 + 0.01));
        let words = |t: &str| t.split_whitespace().collect::<String>();
        assert_eq!(words(&lines.join(" ")), words(&text));
    }
}
