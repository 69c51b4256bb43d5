//! Tables of C functions of NVIDIA's libraries, bound from the very files
//! `libs.rs` found and loaded (#40), not through cudarc's own load by
//! bare names, which may resolve to another copy on the system's search
//! path (see `libs.rs`). cudarc still gives the types (handles,
//! descriptors, enums, statuses); only the calls go through these tables.

/// `c_functions! { pub(crate) struct Name from CudaLib::X; fn f(a: A) -> R; … }`
/// declares `Name`, one field per function (named as the C symbol, typed
/// as its C declaration), and `Name::get()`, which binds every one from
/// `X` once per process and returns the table, or the one line saying
/// what is missing.
///
/// The declarations are the libraries' C declarations, as cudarc's `sys`
/// modules give them (for the version cudarc's `cuda-13000` bindings
/// were generated from).
macro_rules! c_functions {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident from $lib:expr;
        $( fn $f:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty; )*
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        $vis struct $name {
            $( pub(crate) $f: unsafe extern "C" fn($($ty),*) -> $ret, )*
        }

        impl $name {
            /// Every function, bound once per process from the library
            /// `libs.rs` loaded.
            pub(crate) fn get() -> Result<&'static Self, String> {
                static TABLE: std::sync::OnceLock<Result<$name, String>> =
                    std::sync::OnceLock::new();
                TABLE
                    .get_or_init(|| {
                        let libs = $crate::libs::cuda_libraries();
                        Ok(Self {
                            $(
                                // SAFETY: the type is the function's C
                                // declaration; the libraries live in a
                                // static.
                                $f: unsafe {
                                    libs.function::<unsafe extern "C" fn($($ty),*) -> $ret>(
                                        $lib,
                                        stringify!($f),
                                    )
                                }?,
                            )*
                        })
                    })
                    .as_ref()
                    .map_err(Clone::clone)
            }
        }
    };
}

pub(crate) use c_functions;
