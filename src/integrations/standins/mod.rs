//! Development stand-ins: the payment processor and the CRM served from this process on a
//! loopback port, speaking the real systems' protocols, so the real clients in `processor`
//! and `crm` are the clients in every mode. Never started with `APP_ENV=production`.

pub mod crm;
pub mod processor;
