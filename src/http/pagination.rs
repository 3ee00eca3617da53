//! Pagination (DESIGN §6): query `page` (default 1) and `size` (default 20, max 100); body
//! `{"items", "total", "page", "size", "pages"}`.

use std::hash::Hash;

use actix_web::HttpResponse;
use actix_web::http::header::ContentType;
use actix_web::web::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiResult, FieldError};
use crate::store::page_cache::PageCache;

pub const DEFAULT_PAGE_SIZE: i64 = 20;
pub const MAX_PAGE_SIZE: i64 = 100;

/// The `page` and `size` query parameters, as received.
#[derive(Debug, Default, Clone, Copy, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page number, from 1.
    pub page: Option<i64>,
    /// Items per page, 1 to 100.
    pub size: Option<i64>,
}

/// A validated page request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub page: i64,
    pub size: i64,
}

impl PageQuery {
    pub fn validate(self) -> ApiResult<Page> {
        let page = self.page.unwrap_or(1);
        let size = self.size.unwrap_or(DEFAULT_PAGE_SIZE);
        let mut errors = Vec::new();
        if page < 1 {
            errors.push(FieldError::new("page", "must be 1 or more"));
        }
        if !(1..=MAX_PAGE_SIZE).contains(&size) {
            errors.push(FieldError::new(
                "size",
                format!("must be from 1 to {MAX_PAGE_SIZE}"),
            ));
        }
        if errors.is_empty() {
            Ok(Page { page, size })
        } else {
            Err(ApiError::validation(errors))
        }
    }
}

impl Page {
    pub fn limit(&self) -> i64 {
        self.size
    }
    pub fn offset(&self) -> i64 {
        (self.page - 1).saturating_mul(self.size)
    }
}

/// One page of a list. `total` is exact: kept by the writes for a list's fixed filters and
/// counted from the indexes otherwise. Lists that scroll also answer `next_cursor`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Paginated<T> {
    pub items: Vec<T>,
    pub total: i64,
    pub page: i64,
    pub size: i64,
    pub pages: i64,
    /// Where the next page starts, when more items follow (lists that take a `cursor`): pass
    /// it back as `cursor` to read on from the last item given, unaffected by items added
    /// meanwhile. Absent on the last page and on lists without cursors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Where a list that scrolls starts: after `cursor` (a `next_cursor` it answered before),
/// else at `page`. A cursor it did not give is refused (422).
pub fn seek(cursor: Option<&str>, page: Page) -> ApiResult<crate::store::listing::Seek> {
    use crate::store::listing::Seek;
    match cursor {
        None => Ok(Seek::Page(page.page)),
        Some(text) => crate::domain::cursor::Cursor::decode(text)
            .map(Seek::After)
            .ok_or_else(|| {
                ApiError::validation(vec![FieldError::new(
                    "cursor",
                    "is not a next_cursor this list answered",
                )])
            }),
    }
}

/// A list's state filter as received (`?status=…`): `Some(None)` without one,
/// `Some(Some(state))` for a state, and `None` for a text that names no state: that filter
/// matches no row, so its list answers an empty page (as when the text reached the SQL).
pub fn state_filter<S: std::str::FromStr>(text: Option<&str>) -> Option<Option<S>> {
    match text {
        None => Some(None),
        Some(text) => text.parse().ok().map(Some),
    }
}

impl<T> Paginated<T> {
    /// A page of nothing: what a filter no row can match answers.
    pub fn empty(page: Page) -> Self {
        Self::new(Vec::new(), 0, page)
    }

    pub fn new(items: Vec<T>, total: i64, page: Page) -> Self {
        Self {
            items,
            total,
            page: page.page,
            size: page.size,
            pages: if total == 0 {
                0
            } else {
                (total + page.size - 1) / page.size
            },
            next_cursor: None,
        }
    }

    /// The same page, telling where the next one starts.
    pub fn with_next(mut self, next: Option<crate::domain::cursor::Cursor>) -> Self {
        self.next_cursor = next.map(|c| c.encode());
        self
    }

    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Paginated<U> {
        Paginated {
            items: self.items.into_iter().map(f).collect(),
            total: self.total,
            page: self.page,
            size: self.size,
            pages: self.pages,
            next_cursor: self.next_cursor,
        }
    }
}

/// A list's answer the same for everyone, kept by this instance (`store::page_cache`): the
/// JSON kept in `cache` for `key` under `writes`, the count of writes read before this call, or
/// else the page `read` makes, kept under that count.
pub async fn kept<K: Hash + Eq>(
    cache: &PageCache<K, Bytes>,
    key: K,
    writes: i64,
    read: impl Future<Output = ApiResult<impl Serialize>>,
) -> ApiResult<HttpResponse> {
    let json = async {
        let answer = serde_json::to_vec(&read.await?).map_err(ApiError::internal)?;
        ApiResult::Ok(Bytes::from(answer))
    };
    let body = cache.get_or_read(key, writes, Bytes::len, json).await?;
    Ok(HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        let p = PageQuery::default().validate().unwrap();
        assert_eq!((p.page, p.size, p.offset()), (1, 20, 0));
        let p = PageQuery {
            page: Some(3),
            size: Some(100),
        }
        .validate()
        .unwrap();
        assert_eq!(p.offset(), 200);
        assert!(
            PageQuery {
                page: Some(0),
                size: None
            }
            .validate()
            .is_err()
        );
        assert!(
            PageQuery {
                page: None,
                size: Some(101)
            }
            .validate()
            .is_err()
        );
        assert!(
            PageQuery {
                page: None,
                size: Some(0)
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn pages_round_up() {
        let page = Page { page: 1, size: 20 };
        assert_eq!(Paginated::new(Vec::<()>::new(), 0, page).pages, 0);
        assert_eq!(Paginated::new(Vec::<()>::new(), 20, page).pages, 1);
        assert_eq!(Paginated::new(Vec::<()>::new(), 21, page).pages, 2);
    }
}
