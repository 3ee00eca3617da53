//! Demo data, apart from the use cases: the demo accounts (`marketplace seed-demo`), the demo
//! story and the end-to-end reset that loads them (`POST /api/v1/testing/reset-e2e`). It drives
//! the same workflows users go through, so it sits above them: no workflow imports it.

pub mod reset;
pub mod seed;
pub mod story;
