//! The enums Postgres stores as `text` (statuses, roles, kinds), read and written by
//! their wire names. Reading a value this crate does not know is an error, never a
//! guess: a row written by a newer server, or edited by hand, is refused loudly.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::{Decode, Encode, Postgres, Type};

use crate::api::{RequestKind, RequestStatus};
use crate::chat::{Role, RunStatus};

macro_rules! stored_as_text {
    ($($name:ident => $what:literal),* $(,)?) => {$(
        impl Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <&str as Type<Postgres>>::type_info()
            }

            fn compatible(ty: &PgTypeInfo) -> bool {
                <&str as Type<Postgres>>::compatible(ty)
            }
        }

        impl Encode<'_, Postgres> for $name {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as Encode<Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }

        impl PgHasArrayType for $name {
            fn array_type_info() -> PgTypeInfo {
                <&str as PgHasArrayType>::array_type_info()
            }

            fn array_compatible(ty: &PgTypeInfo) -> bool {
                <&str as PgHasArrayType>::array_compatible(ty)
            }
        }

        impl<'r> Decode<'r, Postgres> for $name {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Postgres>>::decode(value)?;
                $name::parse(text)
                    .ok_or_else(|| format!("unknown {} {text:?} in the database", $what).into())
            }
        }
    )*};
}

stored_as_text! {
    RequestStatus => "request status",
    RequestKind => "request kind",
    Role => "message role",
    RunStatus => "run status",
}
